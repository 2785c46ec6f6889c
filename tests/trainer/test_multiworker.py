"""MultiWorkerMirroredStrategy for real: a chief and a worker over loopback with a generated TF_CONFIG.

Census's chief and worker training on their own shares runs through `--local`'s runner, which generates the
TF_CONFIG itself: tests/jobs/local/test_census_e2e.py (one cluster checks both)."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.trainer.helpers import REPO_ROOT, subprocess_env, trainer_args
from tests.trainer.image_helpers import FLOWERS_EVAL, FLOWERS_TRAIN, serve_records, write_records

pytestmark = pytest.mark.training


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def run_cluster(tmp_path, args: list[str]) -> tuple[dict[str, subprocess.Popen], dict[str, str]]:
    """Run ``args`` as a chief and a worker of one MultiWorkerMirroredStrategy cluster; (procs, outputs)."""
    chief_port, worker_port = free_ports(2)
    cluster = {"chief": [f"127.0.0.1:{chief_port}"], "worker": [f"127.0.0.1:{worker_port}"]}
    procs = {}
    for task_type in ("chief", "worker"):
        scratch = tmp_path / f"tmp-{task_type}"
        scratch.mkdir()
        tf_config = json.dumps({"cluster": cluster, "task": {"type": task_type, "index": 0}})
        procs[task_type] = subprocess.Popen(
            args, cwd=REPO_ROOT, env=subprocess_env(TF_CONFIG=tf_config, TMPDIR=str(scratch)),
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    outputs = {}
    try:
        for task_type, proc in procs.items():
            outputs[task_type] = proc.communicate(timeout=240)[0]
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
    return procs, outputs


def split_lines(src: Path, parts: int, root: Path) -> list[Path]:
    """``src``'s lines dealt into ``parts`` files of unequal sizes (the first gets a third more)."""
    lines = src.read_bytes().splitlines(keepends=True)
    cut = len(lines) * 2 // 3
    chunks = [lines[:cut], lines[cut:]] if parts == 2 else [lines]
    paths = []
    for i, chunk in enumerate(chunks):
        paths.append(root / f"{src.name}-{i}")
        paths[-1].write_bytes(b"".join(chunk))
    return paths


def shares_of(output: str) -> tuple[int, int, str]:
    """(records this worker read per epoch, of how many, how) from the trainer's input line."""
    line = next(line for line in output.splitlines() if "trainer: input: worker " in line)
    read, total, how = re.search(r"reads (\d+) of (\d+) training records per epoch \((.*)\)", line).groups()
    return int(read), int(total), how


@pytest.mark.timeout(300)
def test_the_image_classifier_trains_on_two_workers_through_the_same_loop(tmp_path):
    import glob

    import tensorflow as tf

    # Training data in two files (each worker reads one), evaluation in one (each keeps every other record).
    records = list(tf.data.TFRecordDataset(glob.glob(FLOWERS_TRAIN)).as_numpy_iterator())
    for i in range(2):
        write_records(tmp_path / f"train-{i}.tfrecord", records[i * 40:(i + 1) * 40])
    job = tmp_path / "job"
    args = [sys.executable, "-m", "trainer.task", "--model", "image_classifier",
            "--train-files", str(tmp_path / "train-*.tfrecord"), "--eval-files", FLOWERS_EVAL,
            "--image-size", "32", "--num-epochs", "2", "--steps-per-epoch", "3", "--train-batch-size", "8",
            "--job-dir", str(job)]
    procs, outputs = run_cluster(tmp_path, args)
    for task_type, proc in procs.items():
        assert proc.returncode == 0, f"{task_type}:\n{outputs[task_type][-3000:]}"
        assert "strategy: multi_worker, 2 replica(s), global batch 16" in outputs[task_type]
    # Each worker read, checked and decoded only its share, and the shares cover the data.
    shares = {t: [line.split("this worker's share ", 1)[1] for line in out.splitlines()
                  if "trainer: data: " in line] for t, out in outputs.items()}
    assert shares["chief"] == ["(1 of 2): train 40 of 80 records (40 read) from 1 of 2 file(s), cached; "
                               "eval 25 of 50 records (25 read) from 1 of 1 file(s), by record, cached"]
    assert shares["worker"] == [shares["chief"][0].replace("(1 of 2)", "(2 of 2)")]
    # The loop's own input line says the same, as for census.
    assert shares_of(outputs["chief"]) == shares_of(outputs["worker"]) == (40, 80, "by file")
    # Both workers hold the same synchronised model: they evaluate it identically.
    evaluations = {t: [line.split("evaluation: ", 1)[1] for line in out.splitlines()
                       if "trainer: evaluation: " in line] for t, out in outputs.items()}
    assert len(evaluations["chief"]) == 1 and evaluations["chief"] == evaluations["worker"]
    report = json.loads((job / "model" / "metrics.json").read_text())
    assert (report["distribution"], report["replicas"]) == ("multi_worker", 2)
    assert [h["epoch"] for h in report["history"]] == [1, 2]
    assert list((tmp_path / "tmp-worker").iterdir()) == []
    served = serve_records(job / "model", FLOWERS_EVAL, limit=0)
    assert served["classes"] == report["data"]["classes"]
    # Close, not equal: each worker evaluates its own shard and the figures are averaged across workers.
    assert served["loss"] == pytest.approx(report["eval"]["loss"], rel=1e-2)
    assert served["accuracy"] == pytest.approx(report["eval"]["accuracy"], abs=1 / 50 + 1e-6)


@pytest.mark.timeout(300)
def test_divergence_stops_every_worker_without_a_hang(tmp_path, census_slice):
    # The logged loss is reduced across workers, so both see the NaN at the same step and stop together:
    # neither is left waiting in a collective for the other (the timeout would catch a hang).
    job = tmp_path / "job"
    procs, outputs = run_cluster(tmp_path, trainer_args(census_slice, job, "--num-epochs", "2",
                                                        "--steps-per-epoch", "4", "--train-batch-size", "16",
                                                        "--learning-rate", "1e10"))
    errors = {}
    for task_type, proc in procs.items():
        assert proc.returncode == 1, f"{task_type}:\n{outputs[task_type][-3000:]}"
        errors[task_type] = [line for line in outputs[task_type].splitlines()
                             if line.startswith("trainer.task: error:")]
        tail = outputs[task_type][-3000:]
        assert len(errors[task_type]) == 1 and "Traceback" not in outputs[task_type], tail
    assert errors["chief"] == errors["worker"]
    assert errors["chief"][0].startswith(
        "trainer.task: error: training diverged: the training loss is nan at epoch 1/2, step ")
    assert not (job / "model").exists()


@pytest.mark.timeout(300)
def test_a_bad_row_in_the_second_workers_share_stops_both_with_its_line(tmp_path, census_slice):
    """The worker alone reads the second file; both workers refuse the run with the same one line naming
    that file and line, before anything is written (the chief waits for the worker's verdict)."""
    train = split_lines(census_slice["train"], 2, tmp_path)
    lines = train[1].read_bytes().split(b"\n")
    fields = lines[4].split(b",")
    lines[4] = b",".join(fields[:12] + [b" 400"] + fields[13:])  # hours_per_week 400: implausible
    train[1].write_bytes(b"\n".join(lines))
    job = tmp_path / "job"
    args = trainer_args({"train": train[0], "eval": census_slice["eval"]}, job)
    args[args.index(str(train[0])) + 1:args.index(str(train[0])) + 1] = [str(train[1])]
    procs, outputs = run_cluster(tmp_path, args)
    errors = {}
    for task_type, proc in procs.items():
        assert proc.returncode == 2, f"{task_type}:\n{outputs[task_type][-3000:]}"
        assert "Traceback" not in outputs[task_type]
        errors[task_type] = [line for line in outputs[task_type].splitlines()
                             if line.startswith("trainer.task")]
    assert errors["chief"] == errors["worker"] == [
        f"trainer.task: error: {train[1]}:5: implausible value: field 'hours_per_week': 400 is outside the "
        "plausible range 0..168 (use --max-bad-rows N to skip up to N malformed or implausible rows)"]
    assert not job.exists()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("model", ["wide_deep", "image_classifier"])
def test_a_worker_with_no_training_records_stops_both_with_one_line(tmp_path, census_slice, model):
    """By file, the worker's only training file holds no records: the chief's share alone would train while
    the worker had no first batch (the image classifier died in a collective with a traceback). Both refuse
    the run before anything is written, with the same line naming the empty share's file."""
    import glob

    job = tmp_path / "job"
    if model == "wide_deep":
        train = [census_slice["train"], tmp_path / "empty.csv"]
        train[1].write_bytes(b"\n")  # a blank line and no data row
        args = trainer_args({"train": train[0], "eval": census_slice["eval"]}, job)
        args[args.index(str(train[0])) + 1:args.index(str(train[0])) + 1] = [str(train[1])]
        what = "data rows"
    else:
        import tensorflow as tf

        records = list(tf.data.TFRecordDataset(glob.glob(FLOWERS_TRAIN)).as_numpy_iterator())
        train = [write_records(tmp_path / "train-0.tfrecord", records[:40]),
                 write_records(tmp_path / "train-1.tfrecord", [])]
        args = [sys.executable, "-m", "trainer.task", "--model", "image_classifier",
                "--train-files", str(tmp_path / "train-*.tfrecord"), "--eval-files", FLOWERS_EVAL,
                "--image-size", "32", "--train-batch-size", "8", "--job-dir", str(job)]
        what = "records"
    procs, outputs = run_cluster(tmp_path, args)
    errors = {}
    for task_type, proc in procs.items():
        assert proc.returncode == 2, f"{task_type}:\n{outputs[task_type][-3000:]}"
        assert "Traceback" not in outputs[task_type], outputs[task_type][-3000:]
        errors[task_type] = [line for line in outputs[task_type].splitlines()
                             if line.startswith("trainer.task")]
    assert errors["chief"] == errors["worker"] == [
        f"trainer.task: error: --train-files: worker 2 of 2 has no {what} in its share of the files "
        f"({train[1]}): each worker trains on its own files, so give at least 2 files with {what} (a "
        "multiple of 2 files of similar sizes), or fewer workers"]
    assert not job.exists()
