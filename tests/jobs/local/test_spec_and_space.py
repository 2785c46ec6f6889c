"""Pure parts of the local executor: reading the compiled body, the search space, metric files."""

import json
import math

import optuna
import pytest

from jobs.definition.study import grid_points
from jobs.local import search_space, spec, tuning
from jobs.local.run import run_local
from tests.jobs.local.helpers import OUTPUTS, REPO_ROOT, custom_job, pool, tuning_job


def _study(params, **kw):
    return spec.parse_tuning_job(tuning_job([], params=params, **kw)).study


def test_integer_bounds_accept_int64_strings_and_ints():
    study = _study([{"parameterId": "n", "integerValueSpec": {"minValue": "2", "maxValue": 4}}])
    assert (study.parameters[0].low, study.parameters[0].high) == (2, 4)


def test_body_fields_are_read_with_their_rest_names():
    job = spec.parse_tuning_job(
        tuning_job(["--a=1"], trials=5, parallel=2, failed=3, selection="BEST_MEASUREMENT")
    )
    study, trial_job = job.study, job.trial_job
    assert (study.max_trials, study.parallel_trials, study.max_failed_trials) == (5, 2, 3)
    assert (
        study.measurement_selection == "BEST_MEASUREMENT"
        and study.metric_id == "score"
        and study.goal == "MAXIMIZE"
    )
    assert trial_job.pools[0].python_argv == ("-m", "tests.jobs.local.fake_trainer", "--a=1")
    assert trial_job.timeout_s == 600 and trial_job.base_output_uri == "gs://demo-models/runs/study-1"


@pytest.mark.parametrize(
    ("container", "argv"),
    [
        ({"imageUri": OUTPUTS["trainer_image"] + ":v1", "args": ["--x=1"]}, ("-m", "trainer.task", "--x=1")),
        (
            {"imageUri": "any", "command": ["python3", "-m", "trainer.task"], "args": ["--y"]},
            ("-m", "trainer.task", "--y"),
        ),
    ],
)
def test_container_jobs_run_locally_when_they_run_this_repos_trainer(container, argv):
    body = custom_job({"replicaCount": 1, "containerSpec": container})
    assert (
        spec.parse_job_spec(body["jobSpec"], "jobSpec", OUTPUTS["trainer_image"]).pools[0].python_argv == argv
    )


BAD = [
    (
        "CustomJob",
        custom_job({"replicaCount": 1, "containerSpec": {"imageUri": "gcr.io/x/other"}}),
        "jobSpec.workerPoolSpecs.0.containerSpec.imageUri",
    ),
    (
        "CustomJob",
        custom_job({"replicaCount": 1, "containerSpec": {"imageUri": "x", "command": ["bash", "run.sh"]}}),
        "jobSpec.workerPoolSpecs.0.containerSpec.command",
    ),
    ("CustomJob", custom_job(pool(replicas=2)), "jobSpec.workerPoolSpecs.0.replicaCount"),
    ("CustomJob", custom_job(pool(module="no_such_module.task")), "jobSpec.workerPoolSpecs.0"),
    ("CustomJob", {"jobSpec": {"workerPoolSpecs": []}}, "jobSpec.workerPoolSpecs"),
    ("CustomJob", custom_job(*[pool()] * 5), "jobSpec.workerPoolSpecs: 5 worker pools"),
    (
        "CustomJob",
        custom_job(pool(), pool(env={"A": "1"}) | {"pythonPackageSpec": {"pythonModule": "m", "env": ["A"]}}),
        "jobSpec.workerPoolSpecs.1.pythonPackageSpec.env.0",
    ),
    # A study the rules refuse (tests/jobs/test_study_doors.py lists them) stops the run alike.
    ("HyperparameterTuningJob", tuning_job([], trials=2, parallel=3), "parallelTrialCount"),
    ("Pipeline", custom_job(pool()), "kind"),
]


@pytest.mark.parametrize(("kind", "body", "field"), BAD)
def test_bad_input_is_one_line_naming_the_field_exit_2_nothing_written(kind, body, field, tmp_path, capsys):
    assert run_local(kind, body, OUTPUTS, repo_root=REPO_ROOT, local_root=tmp_path / "local") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and field in err and "Traceback" not in err
    # Body paths are spelled as jobs.definition.validate spells them: dotted, never `workerPoolSpecs[0]`.
    assert "[" not in err.split(": ")[2], err
    assert not (tmp_path / "local").exists()


def test_grid_covers_every_integer_and_listed_value():
    params = _study(
        [
            {"parameterId": "n", "integerValueSpec": {"minValue": "1", "maxValue": "3"}},
            {"parameterId": "d", "discreteValueSpec": {"values": [0.5, 1]}},
            {"parameterId": "c", "categoricalValueSpec": {"values": ["a", "b"]}},
        ],
        algorithm="GRID_SEARCH",
    ).parameters
    assert search_space.grid(params) == {"n": [1, 2, 3], "d": [0.5, 1.0], "c": ["a", "b"]}
    assert grid_points(params) == 12


def _samples(scale, kind="doubleValueSpec", lo=1.0, hi=1000.0, n=400):
    declared = _study(
        [{"parameterId": "p", kind: {"minValue": lo, "maxValue": hi}, "scaleType": scale}],
        algorithm="RANDOM_SEARCH",
    )
    study = optuna.create_study(sampler=search_space.make_sampler(declared))
    out = []
    for _ in range(n):
        trial = study.ask()
        out.append(search_space.suggest(trial, declared.parameters)["p"])
        study.tell(trial, 0.0)
    return out


@pytest.mark.parametrize(
    ("scale", "low_share"),
    [
        ("UNIT_LINEAR_SCALE", (0.04, 0.2)),
        ("UNIT_LOG_SCALE", (0.55, 0.8)),
        ("UNIT_REVERSE_LOG_SCALE", (0.0, 0.04)),
    ],
)
def test_scale_types_shape_where_samples_fall(scale, low_share):
    # Share of samples in [1, 100]: linear ~0.1, log 2/3 (two of three decades), reverse log ~0.015.
    values = _samples(scale)
    assert all(1.0 <= v <= 1000.0 for v in values)
    share = sum(v <= 100 for v in values) / len(values)
    assert low_share[0] <= share <= low_share[1], share


def test_reverse_log_integer_stays_integral_and_in_range():
    values = _samples("UNIT_REVERSE_LOG_SCALE", "integerValueSpec", 1, 64, n=100)
    assert all(isinstance(v, int) and 1 <= v <= 64 for v in values)
    assert sum(v >= 48 for v in values) > sum(v <= 16 for v in values)


def test_values_are_appended_as_vertex_formats_them():
    # DISCRETE and DOUBLE values travel as doubles (64 arrives as 64.0), INTEGER ones as integers.
    args = search_space.trial_args({"lr": 0.001, "n": 3, "d": 2.0, "c": "relu", "b": True})
    assert args == ("--lr=0.001", "--n=3", "--d=2.0", "--c=relu", "--b=true")


def test_samplers_follow_the_algorithm():
    assert isinstance(search_space.make_sampler(_study(None)), optuna.samplers.TPESampler)
    assert isinstance(
        search_space.make_sampler(_study(None, algorithm="RANDOM_SEARCH")), optuna.samplers.RandomSampler
    )


def _tpe_trials(params, trials, parallel=1):
    """The values a TPE study suggests, asking ``parallel`` trials before telling their (made-up) scores."""
    declared = _study(params, trials=trials, parallel=parallel)
    study = optuna.create_study(sampler=search_space.make_sampler(declared), direction="maximize")
    out = []
    while len(out) < trials:
        asked = [study.ask() for _ in range(parallel)]
        for trial in asked:
            values = search_space.suggest(trial, declared.parameters)
            out.append(values)
            study.tell(trial, values.get("x", 0.0))
    return out


CENSUS_LIKE = [
    {"parameterId": "x", "doubleValueSpec": {"minValue": 0.0, "maxValue": 1.0}},
    {"parameterId": "bins", "discreteValueSpec": {"values": [32, 64, 128]}},
    {"parameterId": "act", "categoricalValueSpec": {"values": ["relu", "gelu"]}},
]


@pytest.mark.parametrize("parallel", [1, 2])
def test_a_bayesian_study_tries_every_discrete_and_categorical_value_first(parallel):
    trials = _tpe_trials(CENSUS_LIKE, trials=8, parallel=parallel)
    assert sorted(t["bins"] for t in trials[:3]) == [32.0, 64.0, 128.0]
    assert sorted(t["act"] for t in trials[:2]) == ["gelu", "relu"]
    assert len({t["x"] for t in trials[:3]}) == 3  # the other parameters stay random


def test_a_study_too_small_to_try_every_value_leaves_the_start_up_random():
    many = [{"parameterId": "d", "discreteValueSpec": {"values": [1, 2, 3, 4, 5]}}]
    assert sorted(t["d"] for t in _tpe_trials(many, trials=10)[:5]) == [1, 2, 3, 4, 5]
    # Five values would take more than half of 8 trials: the usual random start-up (seeded: its first five
    # trials repeat a value).
    assert len({t["d"] for t in _tpe_trials(many, trials=8)[:5]}) < 5


def test_metric_file_last_or_best_measurement(tmp_path):
    path = tmp_path / "output.metrics"
    lines = [
        {"score": "0.5", "global_step": "1"},
        {"score": "0.9", "global_step": "2"},
        {"score": "0.7", "global_step": "3"},
    ]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert tuning.read_metric(path, "score", "MAXIMIZE", "LAST_MEASUREMENT")[0] == 0.7
    assert tuning.read_metric(path, "score", "MAXIMIZE", "BEST_MEASUREMENT")[0] == 0.9
    assert tuning.read_metric(path, "score", "MINIMIZE", "BEST_MEASUREMENT")[0] == 0.5
    assert tuning.read_metric(path, "loss", "MINIMIZE", "LAST_MEASUREMENT") == (None, [])
    assert tuning.read_metric(tmp_path / "missing", "score", "MAXIMIZE", "LAST_MEASUREMENT") == (None, [])
    assert not math.isnan(tuning.read_metric(path, "score", "MAXIMIZE", "LAST_MEASUREMENT")[0])
