"""One study, three doors, one verdict: each StudySpec case goes through validation (what `run_job.py
--dry-run` runs), the local runner's planning (what `--local` runs before any trial) and `run_job.py convert`
(written as a legacy `hyperparameters`), and all three must accept it, or refuse it with the same words,
naming the same field (convert: the legacy field the value came from).

The rules live once, in jobs/definition/study.py; this table is what keeps a door from growing its own, and
the one place their cases are listed (tests/jobs/test_validate.py keeps only the studies no other door can
express: conditional parameters, a missing goal, value specs set twice or not at all).
"""

from __future__ import annotations

import copy
import re

import pytest
import yaml

from jobs import api
from jobs.definition.errors import JobError
from jobs.local import spec as local_spec
from tests.jobs.helpers import CODE_HASH, IMAGE_HASH, JOBS_DIR, NOW, OUTPUTS, REPO_ROOT

BASE = yaml.safe_load((JOBS_DIR / "census_tuning.yaml").read_text(encoding="utf-8"))
DATA = "gs://demo-project-data/census"
STUDY_KEYS = ("maxTrialCount", "parallelTrialCount", "maxFailedTrialCount", "studySpec")


def double(pid, low, high, scale=None):
    return {"parameterId": pid, "doubleValueSpec": {"minValue": low, "maxValue": high}} | _scale(scale)


def integer(pid, low, high, scale=None):
    return {"parameterId": pid, "integerValueSpec": {"minValue": low, "maxValue": high}} | _scale(scale)


def discrete(pid, values, scale=None):
    return {"parameterId": pid, "discreteValueSpec": {"values": values}} | _scale(scale)


def categorical(pid, values):
    return {"parameterId": pid, "categoricalValueSpec": {"values": values}}


def _scale(scale):
    return {"scaleType": scale} if scale else {}


def study(*parameters, algorithm="ALGORITHM_UNSPECIFIED", trials=8, parallel=2, failures=2):
    return {
        "maxTrialCount": trials,
        "parallelTrialCount": parallel,
        "maxFailedTrialCount": failures,
        "studySpec": {
            "algorithm": algorithm,
            "metrics": [{"metricId": "accuracy", "goal": "MAXIMIZE"}],
            "parameters": list(parameters),
        },
    }


LR = double("learning-rate", 0.001, 0.01, "UNIT_LOG_SCALE")
HP = "trainingInput.hyperparameters"  # where convert reads a legacy study


def refused(path: str, legacy: str, words: str) -> tuple[str, str, str]:
    """A refusal: the body path --dry-run and --local name, the legacy field convert names (under HP), and
    the words all three say."""
    return path, f"{HP}.{legacy}", words


P0 = "studySpec.parameters.0"
# (id, study, None or its refusal) — each invalid case breaks one rule.
CASES = [
    ("the-census-study", {k: BASE[k] for k in STUDY_KEYS}, None),
    (
        "grid-of-integers-and-values",
        study(integer("num-layers", 1, 4), discrete("numeric-bins", [32, 64]), algorithm="GRID_SEARCH"),
        None,
    ),
    (
        "random-with-categories",
        study(categorical("num-layers", ["1", "2"]), LR, algorithm="RANDOM_SEARCH"),
        None,
    ),
    ("a-thousand-trials", study(LR, trials=1000, parallel=4, failures=0), None),
    ("failures-up-to-the-trials", study(LR, trials=4, parallel=1, failures=4), None),
    (
        "integer-range-of-one-value",
        study(integer("num-layers", 2, 2)),
        refused(
            f"{P0}.integerValueSpec.minValue",
            "params.0.minValue",
            "minValue 2 >= maxValue 2; allowed: minValue < maxValue",
        ),
    ),
    (
        "double-min-above-max",
        study(double("learning-rate", 0.1, 0.01)),
        refused(
            f"{P0}.doubleValueSpec.minValue",
            "params.0.minValue",
            "minValue 0.1 >= maxValue 0.01; allowed: minValue < maxValue",
        ),
    ),
    (
        "log-scale-from-zero",
        study(double("learning-rate", 0, 0.1, "UNIT_LOG_SCALE")),
        refused(
            f"{P0}.doubleValueSpec.minValue",
            "params.0.minValue",
            "UNIT_LOG_SCALE with minValue 0.0; allowed: minValue > 0 on a log scale, or UNIT_LINEAR_SCALE",
        ),
    ),
    (
        "reverse-log-integer-from-zero",
        study(integer("num-layers", 0, 4, "UNIT_REVERSE_LOG_SCALE")),
        refused(
            f"{P0}.integerValueSpec.minValue",
            "params.0.minValue",
            "UNIT_REVERSE_LOG_SCALE with minValue 0; allowed: minValue > 0 on a log scale, or "
            "UNIT_LINEAR_SCALE",
        ),
    ),
    (
        "grid-of-a-double",
        study(LR, algorithm="GRID_SEARCH"),
        refused(
            f"{P0}.doubleValueSpec",
            "params.0.type",
            "GRID_SEARCH cannot enumerate the DOUBLE parameter 'learning-rate'; allowed: integerValueSpec, "
            "discreteValueSpec or categoricalValueSpec with GRID_SEARCH",
        ),
    ),
    (
        "over-a-thousand-trials",
        study(LR, trials=1001),
        refused(
            "maxTrialCount",
            "maxTrials",
            "maxTrialCount is 1001; allowed: 1..1000 (the most trials one Vizier study holds)",
        ),
    ),
    (
        "no-trials",
        study(LR, trials=0, parallel=0, failures=0),
        refused("maxTrialCount", "maxTrials", "maxTrialCount is 0; allowed: an integer >= 1"),
    ),
    (
        "more-parallel-than-trials",
        study(LR, trials=2, parallel=3),
        refused(
            "parallelTrialCount",
            "maxParallelTrials",
            "3 parallel trials but maxTrialCount is 2; allowed: 1..2",
        ),
    ),
    (
        "more-failures-than-trials",
        study(LR, trials=2, parallel=1, failures=3),
        refused("maxFailedTrialCount", "maxFailedTrials", "maxFailedTrialCount is 3; allowed: 0..2"),
    ),
    (
        "negative-failures",
        study(LR, failures=-1),
        refused("maxFailedTrialCount", "maxFailedTrials", "maxFailedTrialCount is -1; allowed: 0..8"),
    ),
    (
        "values-not-increasing",
        study(discrete("numeric-bins", [64, 32])),
        refused(
            f"{P0}.discreteValueSpec.values.1",
            "params.0.discreteValues.1",
            "32 after 64: values are not strictly increasing; allowed: strictly increasing numbers",
        ),
    ),
    (
        "repeated-values",
        study(discrete("numeric-bins", [32, 64, 64])),
        refused(
            f"{P0}.discreteValueSpec.values.2",
            "params.0.discreteValues.2",
            "64 after 64: values are not strictly increasing; allowed: strictly increasing numbers",
        ),
    ),
    (
        "log-scale-values-from-zero",
        study(discrete("learning-rate", [0, 0.01], "UNIT_LOG_SCALE")),
        refused(
            f"{P0}.discreteValueSpec.values.0",
            "params.0.discreteValues.0",
            "UNIT_LOG_SCALE with value 0; allowed: values > 0 on a log scale",
        ),
    ),
    (
        "repeated-categories",
        study(categorical("num-layers", ["1", "1"])),
        refused(
            f"{P0}.categoricalValueSpec.values",
            "params.0.categoricalValues",
            "values are empty or repeated; allowed: distinct strings",
        ),
    ),
    (
        "a-parameter-tuned-twice",
        study(LR, double("learning-rate", 0.01, 0.1)),
        refused(
            "studySpec.parameters.1.parameterId",
            "params.1.parameterName",
            "parameter 'learning-rate' is tuned twice; allowed: unique parameterIds",
        ),
    ),
    (
        "no-parameters",
        study(),
        refused(
            "studySpec.parameters", "params", "no parameters to tune; allowed: one or more ParameterSpecs"
        ),
    ),
]


def verdict(error) -> tuple[str, str]:
    """The field a door names and its words (problem; allowed), which every door must say alike (a line
    number is each door's own)."""
    problem = re.sub(r" \(line \d+\)", "", error.problem)
    return error.path, f"{problem}; allowed: {error.allowed}" if error.allowed else problem


def compile_definition(definition: dict, folder):
    """What `run_job.py FILE --dry-run` compiles and validates, for a definition written to ``folder``."""
    path = folder / "study.yaml"
    path.write_text(yaml.safe_dump(definition, sort_keys=False), encoding="utf-8")
    return api.compile_file(
        str(path),
        env="dev",
        overrides=(),
        outputs=OUTPUTS,
        repo_root=REPO_ROOT,
        now=NOW,
        code_hash=CODE_HASH,
        image_hash=IMAGE_HASH,
    )


def dry_run(case, tmp_path) -> tuple[str, str] | None:
    try:
        compile_definition(copy.deepcopy(BASE) | copy.deepcopy(case), tmp_path)
    except JobError as exc:
        return verdict(exc)
    return None


@pytest.fixture(scope="module")
def compiled_body(tmp_path_factory):
    """The census study's request body as compiled: the local door gets each case in its place."""
    return compile_definition(BASE, tmp_path_factory.mktemp("base")).body


def local_plan(case, body) -> tuple[str, str] | None:
    body = copy.deepcopy(body)
    body.update(copy.deepcopy(case))
    try:
        local_spec.parse_tuning_job(body, OUTPUTS["trainer_image"])
    except local_spec.LocalRunError as exc:
        return verdict(exc)
    return None


def legacy_hyperparameters(case) -> dict:
    """The case as a legacy AI Platform Training `hyperparameters`."""
    spec = case["studySpec"]
    params = []
    for p in spec["parameters"]:
        kind, value_spec = next((k, p[k]) for k in p if k.endswith("ValueSpec"))
        legacy = {"parameterName": p["parameterId"], "type": kind.removesuffix("ValueSpec").upper()}
        if kind == "discreteValueSpec":
            legacy["discreteValues"] = value_spec["values"]
        elif kind == "categoricalValueSpec":
            legacy["categoricalValues"] = value_spec["values"]
        else:
            legacy |= value_spec
        if p.get("scaleType"):
            legacy["scaleType"] = p["scaleType"]
        params.append(legacy)
    return {
        "goal": spec["metrics"][0]["goal"],
        "hyperparameterMetricTag": spec["metrics"][0]["metricId"],
        "algorithm": spec["algorithm"],
        "maxTrials": case["maxTrialCount"],
        "maxParallelTrials": case["parallelTrialCount"],
        "maxFailedTrials": case["maxFailedTrialCount"],
        "params": params,
    }


def convert(case, tmp_path) -> tuple[str, str] | None:
    path = tmp_path / "legacy.yaml"
    config = {
        "trainingInput": {"args": ["--model=wide_deep"], "hyperparameters": legacy_hyperparameters(case)}
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    try:
        api.convert_legacy(
            str(path),
            variables={},
            env="dev",
            outputs=OUTPUTS,
            model=None,
            delivery="container",
            extra_args=(f"--train-files={DATA}/adult.data", f"--eval-files={DATA}/adult.test"),
            bucket_map=(),
            strict=False,
            output="jobs/study.yaml",
            command="python scripts/run_job.py convert legacy.yaml",
            repo_root=REPO_ROOT,
            code_hash=CODE_HASH,
            image_hash=IMAGE_HASH,
            now=NOW,
        )
    except JobError as exc:
        return verdict(exc)
    return None


@pytest.mark.parametrize("case, expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_every_door_gives_a_study_the_same_verdict_in_the_same_words(case, expected, compiled_body, tmp_path):
    verdicts = {
        "--dry-run": dry_run(case, tmp_path),
        "--local": local_plan(case, compiled_body),
        "convert": convert(case, tmp_path),
    }
    if expected is None:
        assert verdicts == dict.fromkeys(verdicts, None)
        return
    path, legacy_path, words = expected
    assert verdicts == {
        "--dry-run": (path, words),  # the definition's field
        "--local": (path, words),  # the body's field, spelled the same
        "convert": (legacy_path, words),  # the legacy field the value came from
    }
