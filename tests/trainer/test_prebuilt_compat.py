"""The trainer sdist on the TensorFlow stacks it meets outside our lock, installed and run as Vertex AI does.

Vertex AI ``pip install``s the sdist into a prebuilt container and runs ``python -m trainer.task`` there. Each
stack below is such a container's Python environment (see compat_env.py: a cached virtualenv per stack, the
sdist installed into a throwaway layer on it): the install must leave the image's TensorFlow stack alone,
and the installed trainer, run from outside the checkout with Vertex AI's variables, must train, export,
reload and report, census and the image classifier alike. The runs go in parallel: most of each is
single-threaded (imports, pip, tracing, saving), so on two cores they overlap well. A stack that cannot be
built because pip cannot reach the package index is skipped with that reason; every other failure fails.
"""

from __future__ import annotations

import datetime
import json
import os
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from jobs.definition.package import build_sdist
from tests.helpers import summary_section
from tests.trainer.compat_env import (
    IndexUnreachable,
    StackRun,
    StackSpec,
    cache_key,
    changed,
    is_watched,
    lock_version,
    run_stack,
)
from tests.trainer.helpers import REPO_ROOT

pytestmark = [pytest.mark.training, pytest.mark.timeout(900)]

# Python 3.10 for TF 2.17: the prebuilt images' Python (tf-cpu.2-17.py310), which also decides the newest
# Keras pip resolves there. 3.11 for TF 2.20: our TPU image's Python (Keras 3.15 needs >= 3.11).
ALL_STACKS = (
    # The newest prebuilt training image as shipped.
    StackSpec("tf2.17-keras3.4.1", "3.10", ("tensorflow-cpu==2.17.1", "keras==3.4.1"), "JSON",
              ("image_classifier", "recommender")),
    # The same TensorFlow with whatever Keras 3 pip resolves for it today (re-resolved weekly): census only,
    # the canary for a new Keras release (the other models share its Keras code paths; each run costs ~30 s).
    StackSpec("tf2.17-keras3-newest", "3.10", ("tensorflow-cpu==2.17.1", "keras>=3,<4"), "CSV", ()),
    # The TPU image's TensorFlow (tensorflow-tpu==2.20.0, tested as tensorflow-cpu) with the lock's Keras.
    StackSpec("tf2.20-keras-lock", "3.11", ("tensorflow-cpu==2.20.0", f"keras=={lock_version('keras')}"),
              "EXAMPLE", ("image_classifier",)),
)
# The canary (an open Keras range, re-resolved each ISO week) runs where TRAINER_COMPAT_CANARY=1: the weekly
# canary workflow (.github/workflows/canary.yml). Every pull request ran it (about 150 s beside the other
# stacks) for a result that changes once a week, and it kept `make test` at the 10-minute line; the pinned
# stacks, the ones Vertex AI's image and our TPU image ship, always run.
CANARY = "TRAINER_COMPAT_CANARY"
STACKS = tuple(s for s in ALL_STACKS if not s.floating or os.environ.get(CANARY) == "1")
# Each stack exports a different serving signature, so every format is reloaded on an old stack once; the
# lock's stack runs all three in test_task.py.
SIGNATURE_INPUTS = {"CSV": ["csv_row"], "EXAMPLE": ["examples"]}
PARALLEL = 3


@pytest.fixture(scope="module")
def report(request) -> dict[str, str]:
    """Each stack's resolved versions and timings, printed at the end of the run."""
    return summary_section(request.config, "trainer sdist on prebuilt TensorFlow stacks")


@pytest.fixture(scope="module")
def stack_runs(tmp_path_factory, census_slice, report) -> dict[str, Future]:
    """Every stack's run, started together in the background; a test waits only for its own."""
    root = tmp_path_factory.mktemp("prebuilt")
    sdist = build_sdist(REPO_ROOT, root / "dist")
    executor = ThreadPoolExecutor(max_workers=PARALLEL, thread_name_prefix="stack")
    futures = {spec.name: executor.submit(run_stack, spec, sdist, census_slice, root / spec.name)
               for spec in STACKS}
    yield futures
    executor.shutdown(wait=True)


def _finished(spec: StackSpec, stack_runs, report) -> StackRun:
    result = stack_runs[spec.name].result()
    report[spec.name] = result.summary()
    if isinstance(result.error, IndexUnreachable):
        pytest.skip(f"{spec.name}: {result.error}")
    if result.error is not None:
        raise result.error
    return result


@pytest.fixture(params=STACKS, ids=lambda spec: spec.name)
def run(request, stack_runs, report) -> StackRun:
    return _finished(request.param, stack_runs, report)


@pytest.fixture
def model_run(request, stack_runs, report):
    """(a model's run after census, its metrics.json) on a stack: the parameter is (stack spec, model)."""
    spec, model = request.param
    done = _finished(spec, stack_runs, report).more.get(model)
    assert done is not None and done.train is not None, "the census run failed first"
    assert done.train.returncode == 0, done.train.stderr[-4000:]
    assert done.reload is not None, done.reload_error
    return done, json.loads((done.out / "model" / "metrics.json").read_text())


def _stacks_running(model: str) -> list:
    return [pytest.param((spec, model), id=spec.name) for spec in STACKS if model in spec.models]


def _eval_metrics(result: StackRun) -> dict:
    return json.loads((result.out / "model" / "metrics.json").read_text())


def test_sdist_install_leaves_the_tensorflow_stack_alone(run):
    stack = run.stack.dists
    assert run.before == stack, "the layer must see exactly the stack's packages before the install"
    watched = {name: version for name, version in stack.items() if is_watched(name)}
    assert {"keras", "protobuf"} <= set(watched) and any(n.startswith("tensorflow") for n in watched), watched
    assert {name: run.after.get(name) for name in watched} == watched, run.install.stdout[-3000:]
    assert changed(run.before, run.after) == {}, run.install.stdout[-3000:]
    assert run.after.get("trainer") == "0.1.0" and "trainer" not in run.before
    # Imported from the layer's site-packages (run from outside the checkout), not from the repository.
    layer = run.out.parent / "venv"
    assert run.trainer_file and Path(run.trainer_file).is_relative_to(layer), run.trainer_file


def test_trains_exports_and_reports_like_on_vertex(run):
    assert run.train.returncode == 0, run.train.stderr[-4000:]
    model = run.out / "model"
    assert (model / "saved_model.pb").is_file() and (model / "variables").is_dir()
    metrics = _eval_metrics(run)
    assert metrics["data"]["train"]["rows"] == 2000 and len(metrics["history"]) == 1
    records = [json.loads(line) for line in (run.out / "hypertune/output.metrics").read_text().splitlines()]
    assert len(records) == 1 and records[0]["trial"] == "1" and records[0]["global_step"] == "1"
    assert float(records[0]["accuracy"]) == pytest.approx(metrics["history"][0]["val_accuracy"])
    assert list((run.out / "logs").rglob("events.out.tfevents.*"))


def test_reloaded_export_serves_raw_rows(run):
    assert run.train.returncode == 0, run.train.stderr[-4000:]
    assert run.reload is not None, run.reload_error
    got, fmt = run.reload, run.spec.export_format
    assert got["signatures"] == ["serving_default"]
    if fmt == "JSON":  # one named input per raw feature column
        assert len(got["signature_inputs"]) == 14 and "capital_gain" in got["signature_inputs"]
    else:
        assert got["signature_inputs"] == SIGNATURE_INPUTS[fmt]
    # The preprocessing (vocabularies, crossings, normalisation) travelled inside the SavedModel: raw rows
    # score as the trainer's own evaluation did.
    evaluation = _eval_metrics(run)["eval"]
    assert got["rows"] == 1000
    assert got["auc"] == pytest.approx(evaluation["auc"], abs=1e-3)
    assert got["accuracy"] == pytest.approx(evaluation["accuracy"], abs=1e-3)
    assert got["class_ids_match"] and got["probability_is_the_labels"]
    assert set(got["labels"]) <= {"<=50K", ">50K"}
    assert 0.0 <= got["probability_range"][0] < got["probability_range"][1] <= 1.0


@pytest.mark.parametrize("model_run", _stacks_running("image_classifier"), indirect=True)
def test_the_image_classifier_trains_and_serves_raw_bytes(model_run):
    done, metrics = model_run
    assert metrics["data"]["classes"] == [str(d) for d in range(10)] and len(metrics["history"]) == 1
    reported = (done.out / "hypertune/output.metrics").read_text().splitlines()
    assert len(reported) == 1
    assert float(json.loads(reported[0])["accuracy"]) == pytest.approx(metrics["history"][0]["val_accuracy"])
    got = done.reload
    assert got["inputs"] == ["image_bytes"] and got["classes"] == metrics["data"]["classes"]
    # Decoding, resizing and scaling travelled in the signature: 2,000 raw PNGs score as evaluation did.
    assert len(got["label"]) == 2000
    assert got["loss"] == pytest.approx(metrics["eval"]["loss"], rel=1e-4)
    assert got["accuracy"] == pytest.approx(metrics["eval"]["accuracy"], abs=1 / 2000 + 1e-6)
    assert all(abs(sum(row) - 1) < 1e-4 for row in got["probabilities"])


@pytest.mark.parametrize("model_run", _stacks_running("recommender"), indirect=True)
def test_the_recommender_trains_and_serves_its_signatures(model_run):
    done, metrics = model_run
    assert 0 < metrics["eval"]["recall_at_k"] <= 1
    assert set(metrics["data"]["baselines"]) == {"popularity", "ease"}
    assert metrics["data"]["item_item"].startswith("EASE's weights on ")  # the whole model ran
    reported = (done.out / "hypertune/output.metrics").read_text().splitlines()
    assert float(json.loads(reported[0])["recall_at_k"]) == pytest.approx(
        metrics["history"][0]["val_recall_at_k"])
    got = done.reload
    assert got["signatures"] == ["serving_default", "similar_items", "top_k"]
    assert got["default_is_top_k"] and got["known"] == [True, False, True]
    assert [sum(bool(i) for i in row) for row in got["items"]] == [5, 3, 2]
    assert got["similar_known"] == [True, False] and got["similar"][1] == [""] * 5
    assert got["empty"] == [{"items": [0, 0], "known": [0], "scores": [0, 0]}] * 2  # an empty request


# --- the helpers' own rules (no stack needed) --------------------------------------------------------------


def test_only_open_ranges_are_re_resolved_weekly():
    pinned, newest, lock = ALL_STACKS
    assert not pinned.floating and newest.floating and not lock.floating
    monday, sunday, next_monday = (datetime.date(2026, 11, 23), datetime.date(2026, 11, 29),
                                   datetime.date(2026, 11, 30))
    assert cache_key(newest, "3.10.13", monday) == cache_key(newest, "3.10.13", sunday)
    assert cache_key(newest, "3.10.13", monday) != cache_key(newest, "3.10.13", next_monday)
    assert cache_key(pinned, "3.10.13", monday) == cache_key(pinned, "3.10.13", next_monday)
    assert cache_key(pinned, "3.10.13", monday) != cache_key(pinned, "3.10.14", monday)


def test_a_replaced_or_removed_package_is_a_change():
    before = {"keras": "3.4.1", "protobuf": "4.25.9", "numpy": "1.26.4"}
    assert changed(before, {**before, "trainer": "0.1.0"}) == {}
    assert changed(before, {**before, "protobuf": "7.36.2"}) == {"protobuf": ("4.25.9", "7.36.2")}
    assert changed(before, {"keras": "3.4.1", "numpy": "1.26.4"}) == {"protobuf": ("4.25.9", None)}
    assert [n for n in ("tensorflow-cpu", "tensorboard", "keras", "protobuf", "numpy") if is_watched(n)] == [
        "tensorflow-cpu", "tensorboard", "keras", "protobuf"]


# --- trainer.compat's work-arounds, in this process (the lock's Keras) -------------------------------------


@pytest.mark.parametrize("text, expected", [("3.4.1", (3, 4, 1)), ("3.15.1", (3, 15, 1)),
                                            ("3.14.0rc1", (3, 14, 0)), ("3.16.0.dev2026112303", (3, 16, 0)),
                                            ("3", (3, 0, 0))])
def test_keras_versions_compare_as_numbers(text, expected):
    from trainer.compat import parse_version

    assert parse_version(text) == expected


class _Archive:
    def __init__(self) -> None:
        self.calls: list = []

    def track(self, layer) -> None:
        self.calls.append(layer)


class _ArchiveBefore36(_Archive):
    def write_out(self, filepath, options=None):
        self.calls.append(filepath)
        print(f"Saved artifact at '{filepath}'. The following endpoints are available: ...")


class _ArchiveSince36(_Archive):
    def write_out(self, filepath, options=None, verbose=True):
        self.calls.append((filepath, verbose))


def test_export_is_quiet_with_and_without_write_out_verbose(capsys):
    from trainer.compat import write_export_archive

    old, new = _ArchiveBefore36(), _ArchiveSince36()
    write_export_archive(old, "/m")
    write_export_archive(new, "/m")
    assert old.calls == ["/m"] and new.calls == [("/m", False)]
    assert capsys.readouterr().out == ""
