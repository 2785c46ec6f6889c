"""The task interface (trainer/models/base.py) proved with a test-only task, ``tiny``, registered for a test.

``tiny`` has its own flags, metric (``mae``, MINIMIZE), export format and default overrides, and hooks that
really train (a two-feature regression), so the tests below show what the next task gets from one module plus
one registry line: its ``--help``, its flag validation, its contract in the job tooling and a training run
through the generic loop. This module is also the task module the registry imports for ``tiny``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass

import pytest

from tests.trainer.helpers import REPO_ROOT, TINY_MODEL, TINY_MODULE, subprocess_env, tiny_task_registered
from trainer.models.base import (
    MINIMIZE,
    ConfigError,
    Task,
    TaskConfig,
    TaskData,
    TaskSpec,
    check,
    lazy,
    option,
)
from trainer.sharding import UNSHARDED, Shard


@dataclass(frozen=True)
class TinyConfig(TaskConfig):
    tiny_units: int = option(4, "hidden units of the tiny regressor (default %(default)s)")
    activation: str = option("relu", "hidden activation (default %(default)s)", choices=("relu", "tanh"))
    warm_start: bool = option(False, "start from the saved weights (default %(default)s)")
    init_weights: str | None = option(None, "weights file to start from", type=str, metavar="PATH")

    def validate(self) -> None:
        check(1 <= self.tiny_units <= 64, "tiny_units", "in 1..64", self.tiny_units)


def _make_data(cfg, global_train_batch: int, global_eval_batch: int,
               shard: Shard = UNSHARDED) -> TaskData:
    import keras
    import numpy as np
    import tensorflow as tf

    from trainer.input_files import expand_files

    def load(patterns, flag):
        table = np.concatenate([np.loadtxt(f, delimiter=",", ndmin=2, dtype="float32")
                                for f in expand_files(patterns, flag)])
        return table[:, :-1], table[:, -1:]

    (x, y), (ex, ey) = load(cfg.train_files, "--train-files"), load(cfg.eval_files, "--eval-files")
    preprocessor = keras.layers.Rescaling(0.5, name="tiny_preprocessor")
    preprocessor(x[:1])  # built before the export tracks it
    train = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(len(x), seed=cfg.seed)
    evaluation = tf.data.Dataset.from_tensor_slices((ex, ey))

    def transform(features, target):
        return preprocessor(features), target

    return TaskData(train=train.batch(global_train_batch).map(transform),
                    eval=evaluation.batch(global_eval_batch).map(transform), train_rows=len(x),
                    eval_rows=len(ex), train_steps=-(-len(x) // global_train_batch),
                    preprocessor=preprocessor, report={"summary": f"{len(x)} train rows"})


def _build_model(cfg, data: TaskData):
    import keras

    inputs = keras.Input(shape=(2,), name="x")
    hidden = keras.layers.Dense(cfg.task.tiny_units, activation=cfg.task.activation)(inputs)
    model = keras.Model(inputs, keras.layers.Dense(1)(hidden))
    model.compile(optimizer=keras.optimizers.SGD(cfg.learning_rate), loss="mse",
                  metrics=[keras.metrics.MeanAbsoluteError(name="mae")])
    return model


def _serving_fn(model, data: TaskData, export_format: str):
    import tensorflow as tf

    def predict(x):
        return {"y": model(data.preprocessor(x), training=False)}

    return predict, [tf.TensorSpec([None, 2], tf.float32, name="x")]


SPEC = TaskSpec(
    name=TINY_MODEL,
    description="test-only two-feature regression",
    config=TinyConfig,
    metrics={"mae": MINIMIZE, "loss": MINIMIZE},
    export_formats={"NUMBERS": "a list of two floats"},
    defaults={"learning_rate": 0.05, "num_epochs": 3, "train_batch_size": 16},
    flag_help={"learning_rate": "SGD learning rate (default %(default)s)"},
)
# make_data by name, as a task whose hooks live in a second module would do it.
TASK = Task(spec=SPEC, make_data=lazy(f"{TINY_MODULE}:_make_data"), build_model=_build_model,
            serving_fn=_serving_fn)

BASE = ["--train-files", "a.csv", "--eval-files", "b.csv"]


@pytest.fixture
def tiny():
    with tiny_task_registered():
        yield


def test_every_registered_spec_is_consistent(tiny):
    from trainer import config
    from trainer import models as tasks

    generic = set(config.GENERIC_FIELDS)
    for name in tasks.models():
        spec = tasks.load_spec(name)
        assert spec.name == name
        defaults = config.generic_defaults(name)  # raises on a flag clash or a bad override
        cfg = config.default_config(name, train_files=("a",), eval_files=("b",))
        assert config.validate(cfg) is cfg and isinstance(cfg.task, spec.config)
        files = {"train_files": ("a",), "eval_files": ("b",)}
        assert {k: getattr(cfg, k) for k in generic} == {**defaults, **files}
        assert all(isinstance(v, bool | int | float | str) for v in cfg.hparams().values())  # HParams types
        assert spec.default_metric in spec.reportable_metrics
        assert spec.default_export_format in spec.export_formats


def test_contracts_import_no_tensorflow():
    # What the job tooling loads for every registered model (the tiny task too): specs, parsers, contract.
    code = (f"import sys, trainer.config as c, trainer.models as r; r.TASK_MODULES[{TINY_MODEL!r}] = "
            f"{TINY_MODULE!r}\n"
            "from jobs.definition.trainer_spec import load_trainer_spec\n"
            "contract = load_trainer_spec()\n"
            "for name in r.models(): r.load_task(name); c.build_parser(name)\n"
            "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'keras', 'tf_keras'))"
            "\nassert not heavy, heavy[:5]\n"
            "print(sorted(contract.models))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, env=subprocess_env(),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert TINY_MODEL in out.stdout and "wide_deep" in out.stdout


def test_help_lists_the_generic_flags_and_only_the_models_own(tiny, capsys):
    from trainer.task import main

    with pytest.raises(SystemExit) as done:
        main(["--model", TINY_MODEL, "--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    for flag in ("--tiny-units", "--tiny_units", "--activation", "--warm-start", "--init-weights",
                 "--train-files", "--num-epochs", "--hypertune-metric", "--export-format"):
        assert flag in text
    assert "--first-layer-size" not in text and "--max-bad-rows" not in text
    flat = " ".join(text.split())
    assert "hidden units of the tiny regressor (default 4)" in flat
    assert "SGD learning rate (default 0.05)" in flat and "passes over the training data (default 3)" in flat
    assert "{mae,loss,train_mae,train_loss}" in flat
    assert "NUMBERS (a list of two floats) (default NUMBERS)" in flat


def test_the_tasks_flags_resolve_and_validate(tiny):
    from trainer import config

    cfg = config.resolve_config(BASE + ["--model", TINY_MODEL, "--tiny_units=8", "--warm-start",
                                        "--activation", "tanh", "--export-format", "numbers"])
    assert cfg.task == TinyConfig(tiny_units=8, activation="tanh", warm_start=True)
    assert (cfg.learning_rate, cfg.num_epochs, cfg.train_batch_size) == (0.05, 3, 16)  # the task's defaults
    assert cfg.eval_batch_size == config.TrainerConfig().eval_batch_size  # not overridden: the generic one
    assert (cfg.hypertune_metric, cfg.export_format) == ("mae", "NUMBERS")
    assert cfg.hparams()["tiny_units"] == 8 and "init_weights" not in cfg.hparams()  # None is no HParam
    assert config.config_from_json(cfg.to_json()) == cfg
    switched_off = config.resolve_config(BASE + ["--model", TINY_MODEL, "--warm_start=false"])
    assert switched_off.task.warm_start is False
    for argv, words in [
        (["--tiny-units", "0"], "argument --tiny-units: must be in 1..64, got 0"),
        (["--tiny-units", "x"], "argument --tiny-units/--tiny_units: invalid int value: 'x'"),
        (["--activation", "gelu"], "argument --activation: invalid choice: 'gelu'"),
        (["--warm-start", "maybe"], "argument --warm-start/--warm_start: invalid boolean value: 'maybe'"),
        (["--first-layer-size", "64"], "unrecognized arguments: --first-layer-size 64"),  # a census flag
        (["--hypertune-metric", "auc"], "--hypertune-metric/--hypertune_metric: invalid choice: 'auc'"),
        (["--export-format", "JSON"], "invalid choice: 'JSON'"),
    ]:
        with pytest.raises(ConfigError) as err:
            config.resolve_config(BASE + ["--model", TINY_MODEL, *argv])
        assert words in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="unrecognized arguments: --tiny-units 8"):
        config.resolve_config(BASE + ["--tiny-units", "8"])  # the default model's parser has no tiny flags


def _tuning(args: list[str], parameter: dict, metric: str = "mae", goal: str = "MINIMIZE"):
    from tests.jobs.helpers import TUNING

    return TUNING, {
        "studySpec.metrics.0": {"metricId": metric, "goal": goal},
        "studySpec.parameters": [parameter],
        "trialJobSpec.workerPoolSpecs.0.pythonPackageSpec.args": ["--train-files=a", "--eval-files=b", *args],
    }


UNITS = {"parameterId": "tiny-units", "integerValueSpec": {"minValue": 2, "maxValue": 32}}
LAYERS = {"parameterId": "first-layer-size", "integerValueSpec": {"minValue": 16, "maxValue": 64}}


def test_job_definitions_are_checked_against_the_tasks_contract(tiny):
    from jobs.definition.errors import JobError
    from tests.jobs.helpers import check

    check(*_tuning(["--model=tiny"], UNITS))  # its own flag, its own metric and goal
    check(*_tuning(["--model", "tiny", "--hypertune-metric=train_loss"], UNITS, "train_loss"))
    for args, parameter, metric, goal, path, words in [
        (["--model=tiny"], LAYERS, "mae", "MINIMIZE", "studySpec.parameters.0.parameterId",
         "the trainer has no flag --first-layer-size for --model tiny (a flag of --model wide_deep)"),
        ([], UNITS, "accuracy", "MAXIMIZE", "studySpec.parameters.0.parameterId",
         "the trainer has no flag --tiny-units for --model wide_deep (a flag of --model tiny)"),
        (["--model=tiny"], UNITS, "accuracy", "MAXIMIZE", "studySpec.metrics.0.metricId",
         "the trainer cannot report 'accuracy' for --model tiny (--model wide_deep, image_classifier can)"),
        (["--model=tiny"], UNITS, "mae", "MAXIMIZE", "studySpec.metrics.0.goal",
         "MAXIMIZE 'mae', which is better lower"),
        (["--model=tiny"], {**UNITS, "integerValueSpec": {"minValue": 0, "maxValue": 8}},
         "mae", "MINIMIZE", "studySpec.parameters.0.integerValueSpec",
         "--tiny-units=0, which it rejects (argument --tiny-units: must be in 1..64, got 0)"),
    ]:
        with pytest.raises(JobError) as err:
            check(*_tuning(args, parameter, metric, goal))
        assert err.value.path == path and words in str(err.value), str(err.value)


def test_a_tuned_model_checks_each_models_parameters(tiny):
    from jobs.definition.errors import JobError
    from tests.jobs.helpers import check

    def per_model(children: dict) -> dict:
        return {"parameterId": "model", "categoricalValueSpec": {"values": sorted(children)},
                "conditionalParameterSpecs": [{"parentCategoricalValues": {"values": [m]}, "parameterSpec": p}
                                              for m, p in children.items()]}

    # loss is reported by both models, minimized by both; each child parameter is its own model's flag.
    check(*_tuning(["--hypertune-metric=loss"], per_model({"tiny": UNITS, "wide_deep": LAYERS}), "loss"))
    with pytest.raises(JobError) as err:  # the children swapped: each under the model that lacks it
        check(*_tuning(["--hypertune-metric=loss"], per_model({"tiny": LAYERS, "wide_deep": UNITS}), "loss"))
    assert err.value.path == "studySpec.parameters.0.conditionalParameterSpecs.0.parameterSpec.parameterId"
    assert "no flag --first-layer-size for --model tiny" in str(err.value)
    # mae: tiny reports it, wide_deep (tried by the same study) does not.
    with pytest.raises(JobError) as err:
        check(*_tuning([], per_model({"tiny": UNITS, "wide_deep": LAYERS})))
    assert err.value.path == "studySpec.metrics.0.metricId"
    assert "the trainer cannot report 'mae' for --model wide_deep (--model tiny can)" in str(
        err.value)
    with pytest.raises(JobError) as err:  # the args' --hypertune-metric is checked with each model, too
        check(*_tuning(["--hypertune-metric=mae"], per_model({"tiny": UNITS, "wide_deep": LAYERS})))
    assert err.value.path == "studySpec.parameters.0.categoricalValueSpec"
    assert "trials would run the trainer with --model=wide_deep, which it rejects" in str(err.value)


@pytest.mark.training
@pytest.mark.timeout(180)
def test_the_generic_loop_trains_and_exports_the_task(tmp_path):
    rng = __import__("random").Random(0)
    for name, rows in (("train.csv", 256), ("eval.csv", 64)):
        lines = []
        for _ in range(rows):
            a, b = rng.uniform(-1, 1), rng.uniform(-1, 1)
            lines.append(f"{a:.4f},{b:.4f},{2 * a - b:.4f}")
        (tmp_path / name).write_text("\n".join(lines) + "\n")
    metrics_file = tmp_path / "hypertune" / "output.metrics"
    args = ["--model", TINY_MODEL, "--train-files", str(tmp_path / "train.csv"), "--eval-files",
            str(tmp_path / "eval.csv"), "--job-dir", str(tmp_path / "job"), "--tiny-units", "8"]
    code = (f"import sys; from trainer import models; models.TASK_MODULES[{TINY_MODEL!r}] = "
            f"{TINY_MODULE!r}\nfrom trainer.task import main; sys.exit(main({args!r}))")
    env = subprocess_env(CLOUD_ML_HP_METRIC_FILE=str(metrics_file), CLOUD_ML_TRIAL_ID="1")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True,
                         timeout=170, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    model = tmp_path / "job" / "model"
    assert (model / "saved_model.pb").is_file()
    saved = json.loads((model / "trainer_config.json").read_text())
    assert saved["model"] == TINY_MODEL and saved["task"]["tiny_units"] == 8 and saved["num_epochs"] == 3
    reports = [json.loads(line) for line in metrics_file.read_text().splitlines()]
    assert [r["global_step"] for r in reports] == ["1", "2", "3"] and all("mae" in r for r in reports)
    assert float(reports[-1]["mae"]) < float(reports[0]["mae"]) or float(reports[-1]["mae"]) < 0.2
    assert set(json.loads((model / "metrics.json").read_text())["eval"]) == {"loss", "mae"}
