"""`run_job.py serve MODEL_DIR --container` and `batch-predict ... --local --container`: the image
classifier's and the recommender's exports served from this checkout's cpu image as Vertex AI runs a Model
Registry entry (fixtures in tests/container/conftest.py), each prediction what the SavedModel itself
answers; SIGTERM stops the server cleanly and removes its container."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobs.local.container_plan import RUN_LABEL
from jobs.local.environment import free_ports
from tests.container.conftest import REPO_ROOT
from tests.helpers import subprocess_env
from tests.serving.helpers import Server
from tests.trainer.helpers import run_trainer
from tests.trainer.image_helpers import FLOWERS_EVAL, FLOWERS_TRAIN, encoded_images, serve_records

pytestmark = pytest.mark.training

RUN_JOB = REPO_ROOT / "scripts" / "run_job.py"
SCORE_RECOMMENDER = REPO_ROOT / "tests" / "trainer" / "score_recommender.py"
RATINGS = REPO_ROOT / "data" / "movielens" / "ratings.csv"
READY_S = 300  # the container's start, TensorFlow's import and the model's load, on a loaded machine


def serve_containers(engine, verb: str = "serve") -> list[str]:
    """The containers (name and ports) a `run_job.py VERB --container` left or runs."""
    listed = engine.call("ps", "--all", "--filter", f"label={RUN_LABEL}", "--format", "{{.Names}} {{.Ports}}")
    return [line for line in listed.stdout.decode().splitlines() if line.startswith(f"{verb}-")]


@contextlib.contextmanager
def container_server(model: Path, log: Path, engine) -> Iterator[Server]:
    """`run_job.py serve MODEL --container` on a free port until it answers /health 200; on leaving, SIGTERM
    to run_job.py alone must stop it cleanly (exit 0, the server's "stopped") and leave no container on its
    port."""
    port = free_ports(1)[0]
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, str(RUN_JOB), "serve", str(model), "--container", "--port",
                                 str(port)], cwd=REPO_ROOT, env=subprocess_env(), stdout=out,
                                stderr=subprocess.STDOUT)
    try:
        server = Server(port, log, proc=proc)
        deadline = time.monotonic() + READY_S
        while True:
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            try:
                if server.request("GET", "/health")[0] == 200:
                    break
            except (OSError, AssertionError):  # the port is published before the server listens
                pass
            time.sleep(0.5)
        assert [line for line in serve_containers(engine) if f":{port}->" in line]
        yield server
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 0, log.read_text()[-3000:]
        assert "serving: stopped" in log.read_text()
        assert not [line for line in serve_containers(engine) if f":{port}->" in line]
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.fixture(scope="module")
def recommender_model(tmp_path_factory) -> Path:
    """A recommender trained on MovieLens's first 1000 ratings (7 users)."""
    work = tmp_path_factory.mktemp("recommender")
    with open(RATINGS, encoding="utf-8") as source:
        (work / "ratings.csv").write_text("".join(source.readline() for _ in range(1001)))
    out = run_trainer([sys.executable, "-m", "trainer.task", "--model", "recommender", "--train-files",
                       str(work / "ratings.csv"), "--job-dir", str(work), "--num-epochs", "2"], timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return work / "model"


@pytest.fixture(scope="module")
def flowers_model(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("flowers")
    out = run_trainer([sys.executable, "-m", "trainer.task", "--model", "image_classifier", "--train-files",
                       FLOWERS_TRAIN, "--eval-files", FLOWERS_EVAL, "--image-size", "32", "--num-epochs", "1",
                       "--train-batch-size", "16", "--job-dir", str(work)], timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return work / "model"


def test_the_recommender_served_from_the_container_answers_as_its_saved_model(recommender_model, engine,
                                                                               cpu_image, tmp_path):
    scored = subprocess.run([sys.executable, str(SCORE_RECOMMENDER), str(recommender_model)],
                            capture_output=True, text=True, env=subprocess_env(), timeout=120, cwd="/")
    assert scored.returncode == 0, scored.stderr[-3000:]
    own = json.loads(scored.stdout.strip().splitlines()[-1])
    with container_server(recommender_model, tmp_path / "serve.log", engine) as server:
        asks = [{"user": "1", "k": 5}, {"user": "no-such-user", "k": 3}, {"user": "2", "k": 2}]
        best = server.predictions(asks, signature="top_k")
        near = server.predictions([{"item": "1", "k": 5}, {"item": "no-such-item", "k": 3}], "similar_items")
    assert [p["items"] for p in best] == own["items"]
    assert [p["scores"] for p in best] == [pytest.approx(row, rel=1e-6) for row in own["scores"]]
    assert [p["items"] for p in near] == own["similar"]
    assert near[0]["scores"] == pytest.approx(own["similar_scores"][0], rel=1e-6)


def test_the_image_classifier_served_from_the_container_answers_as_its_saved_model(flowers_model, engine,
                                                                                    cpu_image, tmp_path):
    own = serve_records(flowers_model, FLOWERS_EVAL, limit=0)
    images = [base64.b64encode(image).decode() for image in encoded_images(FLOWERS_EVAL)]
    with container_server(flowers_model, tmp_path / "serve.log", engine) as server:
        served = [p for start in range(0, len(images), 10)
                  for p in server.predictions([{"b64": b} for b in images[start:start + 10]])]
    assert [p["label"] for p in served] == own["label"]
    for got, expected in zip(served, own["probabilities"], strict=True):
        assert got["probabilities"] == pytest.approx(expected, abs=1e-5)


def test_a_batch_prediction_in_the_container_writes_what_the_bare_server_writes(recommender_model, engine,
                                                                                 cpu_image, tmp_path):
    root = tmp_path / "root"
    users = root / "gs" / "demo-data" / "batch" / "users.jsonl"
    users.parent.mkdir(parents=True)
    users.write_bytes((recommender_model / "users.jsonl").read_bytes())
    results = {}
    for mode in ("bare", "container"):
        extra = ["--container"] if mode == "container" else []
        run = subprocess.run(
            [sys.executable, str(RUN_JOB), "batch-predict", str(recommender_model), "--local", *extra,
             "--local-root", str(root), "--signature", "top_k", "--input", "gs://demo-data/batch/*.jsonl",
             "--output", f"gs://demo-models/{mode}/"],
            cwd=REPO_ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=600,
        )
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
        (folder,) = (root / "gs" / "demo-models" / mode).iterdir()
        results[mode] = {p.name: p.read_text() for p in folder.iterdir()}
    assert results["container"] == results["bare"]
    lines = results["container"]["prediction.results-00000-of-00001"].splitlines()
    assert len(lines) == 7 and all(len(json.loads(line)["prediction"]["items"]) == 10 for line in lines)
    assert not serve_containers(engine, "batch-predict")
    assert os.getuid() == (root / "gs" / "demo-models" / "container").stat().st_uid
