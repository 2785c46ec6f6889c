"""Shared by the local executor's tests: builders for compiled Vertex AI bodies that run the fake trainer
(tests/jobs/local/fake_trainer.py), and process checks."""

import copy
import json
import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[3]
FAKE = "tests.jobs.local.fake_trainer"
OUTPUTS = {
    "project": "demo",
    "data_bucket": "gs://demo-data",
    "models_bucket": "gs://demo-models",
    "trainer_image": "us-central1-docker.pkg.dev/demo/ml/trainer",
}


def pool(args=(), replicas=1, machine=None, module=FAKE, env=None):
    spec = {
        "executorImageUri": "us-docker.pkg.dev/vertex-ai/training/tf-cpu.2-17.py310:latest",
        "packageUris": ["gs://demo-staging/trainer-0.1.0.tar.gz"],
        "pythonModule": module,
        "args": list(args),
    }
    if env:
        spec["env"] = [{"name": k, "value": v} for k, v in env.items()]
    return {
        "machineSpec": machine or {"machineType": "n1-standard-4"},
        "replicaCount": str(replicas),
        "pythonPackageSpec": spec,
    }


def job_spec(*pools, base="gs://demo-models/runs/job-1"):
    return {
        "workerPoolSpecs": list(pools),
        "baseOutputDirectory": {"outputUriPrefix": base},
        "serviceAccount": "runtime@demo.iam.gserviceaccount.com",
        "scheduling": {"timeout": "600s"},
    }


def custom_job(*pools, base="gs://demo-models/runs/job-1"):
    return {"displayName": "fake-job", "jobSpec": job_spec(*pools, base=base), "labels": {"app": "test"}}


PARAMS = [
    {
        "parameterId": "x",
        "doubleValueSpec": {"minValue": 0.0, "maxValue": 1.0},
        "scaleType": "UNIT_LINEAR_SCALE",
    },
    {
        "parameterId": "n",
        "integerValueSpec": {"minValue": "1", "maxValue": "5"},
        "scaleType": "UNIT_LINEAR_SCALE",
    },
    {"parameterId": "c", "categoricalValueSpec": {"values": ["a", "b", "c"]}},
]


def tuning_job(
    args,
    *,
    trials=4,
    parallel=2,
    failed=0,
    params=None,
    algorithm="ALGORITHM_UNSPECIFIED",
    selection="LAST_MEASUREMENT",
    base="gs://demo-models/runs/study-1",
    name="fake-study",
    goal="MAXIMIZE",
):
    return {
        "displayName": name,
        "studySpec": {
            "metrics": [{"metricId": "score", "goal": goal}],
            "parameters": copy.deepcopy(params or PARAMS),
            "algorithm": algorithm,
            "measurementSelectionType": selection,
        },
        "maxTrialCount": trials,
        "parallelTrialCount": parallel,
        "maxFailedTrialCount": failed,
        "trialJobSpec": job_spec(pool(args), base=base),
        "labels": {"app": "test"},
    }


def dumps(directory: Path) -> dict:
    return {p.stem: json.loads(p.read_text()) for p in sorted(directory.glob("*.json"))}


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); it has exited.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return False


def snapshot(root: Path) -> dict[str, str]:
    """Every path under root (symlinks not followed) with its kind and size or target: compare two to prove
    that nothing was written."""
    found = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_symlink():
            found[rel] = f"link -> {os.readlink(path)}"
        elif path.is_dir():
            found[rel] = "dir"
        else:
            found[rel] = f"file {path.lstat().st_size}"
    return found


def one_line(err: str) -> str:
    """The single line of a bad-input error (asserting it is one line, without a traceback)."""
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err.strip()


def refused(body, tmp_path: Path, capsys, outputs=OUTPUTS, root=None, **kw) -> str:
    """Run body on root (default tmp_path/root): exit status 2, one line, nothing under tmp_path changed.

    Returns the error line."""
    from jobs.local.run import run_local

    root = root or tmp_path / "root"
    before = snapshot(tmp_path)
    kind = "HyperparameterTuningJob" if "studySpec" in body else "CustomJob"
    rc = run_local(kind, body, outputs, repo_root=REPO_ROOT, local_root=root, **kw)
    err = one_line(capsys.readouterr().err)
    assert rc == 2, err
    assert snapshot(tmp_path) == before, "nothing may be written, inside the root or outside it"
    return err
