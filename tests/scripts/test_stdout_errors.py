"""A write error on run_job.py's stdout, in every verb: a full device (`> /dev/full`) and a pipe whose reader
has gone (`| head -c1` once head exits) are one line on stderr and exit status 1, never a traceback, a
silent exit 0 (argparse drops the error of its help), nor a server or a local job started anyway. The real
script runs in a subprocess; only `report` gets a fake Vertex AI endpoint."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from jobs.local.environment import REPLICA_LOGS
from tests.jobs.helpers import JOBS_DIR, REPO_ROOT

RUN_JOB = str(REPO_ROOT / "scripts" / "run_job.py")
DATA = ["--", "--train-files=gs://acme-ml-dev-data/a.csv", "--eval-files=gs://acme-ml-dev-data/b.csv"]
NAME = "projects/demo-project/locations/us-central1/customJobs/7"
# `report` as run_job.py runs it against a fake endpoint: the script's entry point, the SDK factory swapped.
REPORT = textwrap.dedent(f"""\
    import runpy, sys
    import jobs.cloud.client
    from tests.jobs.fake_vertex import FakeVertex, FakeVertexServer
    server = FakeVertexServer(FakeVertex()).__enter__()
    server.fake.add_job({NAME!r}, {{"displayName": "census-cpu-1", "state": "JOB_STATE_SUCCEEDED"}})
    jobs.cloud.client.default_factory = server.factory(sys.argv[1])
    sys.argv = [{RUN_JOB!r}, "report", {NAME!r}, "--report-dir", sys.argv[1] + "/report"]
    runpy.run_path(sys.argv[0], run_name="__main__")
    """)


def _saved_model(tmp_path) -> str:
    model = tmp_path / "model"
    (model / "variables").mkdir(parents=True)
    (model / "saved_model.pb").write_bytes(b"")  # enough for the check before the server starts
    return str(model)


def _batch_input(tmp_path) -> list[str]:
    (tmp_path / "local/gs/bkt/in").mkdir(parents=True)
    (tmp_path / "local/gs/bkt/in/a.jsonl").write_text('{"x": 1}\n')
    local = str(tmp_path / "local")
    return ["--input", "gs://bkt/in/a.jsonl", "--output", "gs://bkt/out/", "--local-root", local]


VERBS = {
    "help": lambda tmp: ["--help"],
    "help-all": lambda tmp: ["--help-all"],
    "convert-help": lambda tmp: ["convert", "--help"],
    "dry-run": lambda tmp: [str(JOBS_DIR / "census_cpu.yaml"), "--dry-run"],
    "convert": lambda tmp: ["convert", str(REPO_ROOT / "tests/jobs/legacy/hptuning_config.yaml"), *DATA],
    "serve": lambda tmp: ["serve", _saved_model(tmp), "--port", "0"],
    "local": lambda tmp: [str(JOBS_DIR / "census_cpu.yaml"), "--local", "--local-root", str(tmp / "local")],
    "report": None,
    "batch-dry-run": lambda tmp: ["batch-predict", "recommender@production", "--input", "gs://bkt/a.jsonl",
                                  "--output", "gs://bkt/out/", "--dry-run"],
    "batch-local": lambda tmp: ["batch-predict", _saved_model(tmp), "--local", *_batch_input(tmp)],
}


def _run(argv, tmp_path, stdout, env):
    command = [sys.executable, *(["-c", REPORT, str(tmp_path)] if argv is None else [RUN_JOB, *argv])]
    return subprocess.run(
        command, cwd=REPO_ROOT, env=env, stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=120
    )


@pytest.mark.parametrize("sink", ["full", "closed-pipe"])
@pytest.mark.parametrize("verb", list(VERBS))
def test_a_write_error_on_stdout_is_one_line_and_exit_1(verb, sink, tmp_path, script_env):
    make = VERBS[verb]
    argv = None if make is None else make(tmp_path)
    if sink == "full":
        with open("/dev/full", "w") as full:
            result = _run(argv, tmp_path, full, script_env)
    else:
        read, write = os.pipe()
        os.close(read)  # the reader is gone before the first write: every write is EPIPE
        try:
            result = _run(argv, tmp_path, write, script_env)
        finally:
            os.close(write)
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.splitlines()
    why = "No space left on device" if sink == "full" else "Broken pipe"
    assert lines == [f"run_job.py: error: cannot write to stdout ({why}); the output is incomplete"], lines
    assert result.returncode == 1
    if verb == "local":  # it stopped at its first line, before any replica started
        assert not list((tmp_path / "local").rglob(REPLICA_LOGS))
    if verb == "batch-local":  # it stopped at its first line: no server started, nothing written
        assert not list((tmp_path / "local").rglob("prediction-*"))


def test_build_image_prints_its_tags_or_says_it_could_not(script_env):
    with open("/dev/full", "w") as full:
        result = subprocess.run(
            [sys.executable, str(REPO_ROOT / "scripts" / "build_image.py"), "--print-tag"],
            cwd=REPO_ROOT, env=script_env, stdout=full, stderr=subprocess.PIPE, text=True, timeout=120,
        )
    assert result.stderr.splitlines() == [
        "build_image.py: error: cannot write to stdout (No space left on device); the output is incomplete"
    ]
    assert result.returncode == 1
