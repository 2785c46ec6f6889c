"""trainer.config: the flag contract the job tooling reads, and config resolution/validation."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest

from tests.trainer.helpers import REPO_ROOT, subprocess_env
from trainer import config as C
from trainer.callbacks import keras_log_key
from trainer.registry import TASK_MODULES, load_task

BASE = ["--train-files", "a.csv", "--eval-files", "b.csv"]


def test_config_imports_without_tensorflow():
    code = ("import sys, trainer.config as c, trainer.task, trainer.env; c.build_parser(); "
            "assert 'tensorflow' not in sys.modules and 'keras' not in sys.modules, 'TF imported'; "
            "print(c.MODELS)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, env=subprocess_env(),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "wide_deep" in out.stdout


def test_models_are_the_registered_tasks():
    assert C.MODELS == tuple(TASK_MODULES) == ("wide_deep",)
    for name in C.MODELS:
        assert load_task(name).name == name


def test_every_flag_has_hyphen_and_underscore_spellings():
    parser = C.build_parser()
    fields = {f.name for f in dataclasses.fields(C.TrainerConfig)}
    options = {opt for action in parser._actions for opt in action.option_strings}
    for name in fields:
        assert f"--{name.replace('_', '-')}" in options
        assert f"--{name}" in options


def test_flags_resolve_into_typed_config():
    cfg = C.resolve_config(BASE + ["b2.csv", "--first_layer_size=64", "--num-layers", "2",
                                   "--scale-factor=0.5", "--export-format", "csv", "--verbosity", "warning",
                                   "--learning_rate", "0.01"])
    assert cfg.train_files == ("a.csv",) and cfg.eval_files == ("b.csv", "b2.csv")
    assert (cfg.first_layer_size, cfg.num_layers, cfg.scale_factor) == (64, 2, 0.5)
    assert cfg.layer_sizes() == (64, 32)
    assert cfg.export_format == "CSV" and cfg.verbosity == "WARNING" and cfg.learning_rate == 0.01
    assert C.config_from_json(cfg.to_json()) == cfg


def test_defaults_are_the_dataclass_defaults():
    cfg = C.resolve_config(BASE)
    assert dataclasses.replace(cfg, train_files=(), eval_files=()) == C.TrainerConfig()
    assert cfg.hypertune_metric == C.DEFAULT_HYPERTUNE_METRIC == "accuracy"


def test_layer_sizes_never_below_two():
    cfg = C.TrainerConfig(first_layer_size=10, num_layers=4, scale_factor=0.1)
    assert cfg.layer_sizes() == (10, 2, 2, 2)


@pytest.mark.parametrize("argv, flag", [
    (["--train-batch-size", "-5"], "--train-batch-size"),
    (["--eval-batch-size", "0"], "--eval-batch-size"),
    (["--num-layers", "0"], "--num-layers"),
    (["--num-epochs", "0"], "--num-epochs"),
    (["--dropout", "1.0"], "--dropout"),
    (["--scale-factor", "0"], "--scale-factor"),
    (["--learning-rate", "-1"], "--learning-rate"),
    (["--learning-rate", "inf"], "--learning-rate"),  # finite only: inf would train into NaN weights
    (["--learning-rate", "nan"], "--learning-rate"),
    (["--max-bad-rows", "-1"], "--max-bad-rows"),
    (["--steps-per-epoch", "0"], "--steps-per-epoch"),
    (["--model", "resnet"], "--model"),
    (["--export-format", "XML"], "--export-format"),
    (["--hypertune-metric", "f1"], "--hypertune-metric"),
    (["--num-layers", "two"], "--num-layers"),
    (["--no-such-flag", "1"], "--no-such-flag"),
])
def test_bad_values_name_the_flag(argv, flag):
    with pytest.raises(C.ConfigError) as err:
        C.resolve_config(BASE + argv)
    message = str(err.value)
    assert flag in message and "\n" not in message


def test_missing_required_flag():
    with pytest.raises(C.ConfigError, match="--eval-files"):
        C.resolve_config(["--train-files", "a.csv"])


def test_no_prefix_abbreviations():
    # A tuning parameterId must match a flag exactly; "--first" must not silently mean --first-layer-size.
    with pytest.raises(C.ConfigError):
        C.resolve_config(BASE + ["--first", "3"])


def test_reportable_metrics_map_to_keras_logs():
    assert set(C.REPORTABLE_METRICS) == set(C.METRIC_GOALS)
    assert {keras_log_key(t) for t in C.REPORTABLE_METRICS} == {
        "val_accuracy", "val_auc", "val_loss", "accuracy", "auc", "loss"}
    assert C.METRIC_GOALS["loss"] == "MINIMIZE" and C.METRIC_GOALS["accuracy"] == "MAXIMIZE"


def test_config_json_rejects_unknown_keys():
    raw = json.loads(C.resolve_config(BASE).to_json())
    raw["bogus"] = 1
    with pytest.raises(C.ConfigError, match="bogus"):
        C.config_from_json(json.dumps(raw))
