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
from trainer.models import TASK_MODULES, load_spec, load_task, models
from trainer.models.base import task_flags
from trainer.models.census import CensusConfig

BASE = ["--train-files", "a.csv", "--eval-files", "b.csv"]


def test_config_imports_without_tensorflow():
    code = ("import sys, trainer.config as c, trainer.task, trainer.env, trainer.models as r; "
            "c.build_parser(); "
            "assert 'tensorflow' not in sys.modules and 'keras' not in sys.modules, 'TF imported'; "
            "print(r.models())")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, env=subprocess_env(),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "wide_deep" in out.stdout


def test_models_are_the_registered_tasks():
    assert models() == tuple(TASK_MODULES) and "wide_deep" in models()
    assert C.DEFAULT_MODEL == "wide_deep"  # job files written before --model existed train census
    for name in models():
        assert load_task(name).name == name


def test_every_flag_has_hyphen_and_underscore_spellings():
    parser = C.build_parser()
    fields = set(C.GENERIC_FIELDS) | set(task_flags(CensusConfig))
    options = {opt for action in parser._actions for opt in action.option_strings}
    for name in fields:
        assert f"--{name.replace('_', '-')}" in options
        assert f"--{name}" in options


def test_flags_resolve_into_typed_config():
    cfg = C.resolve_config(BASE + ["b2.csv", "--first_layer_size=64", "--num-layers", "2",
                                   "--scale-factor=0.5", "--export-format", "csv", "--verbosity", "warning",
                                   "--learning_rate", "0.01"])
    assert cfg.train_files == ("a.csv",) and cfg.eval_files == ("b.csv", "b2.csv")
    assert (cfg.task.first_layer_size, cfg.task.num_layers, cfg.task.scale_factor) == (64, 2, 0.5)
    assert cfg.task.layer_sizes() == (64, 32)
    assert cfg.export_format == "CSV" and cfg.verbosity == "WARNING" and cfg.learning_rate == 0.01
    assert C.config_from_json(cfg.to_json()) == cfg


def test_defaults_are_the_generic_ones_with_the_tasks_overrides():
    cfg = C.resolve_config(BASE)
    assert dataclasses.replace(cfg, train_files=(), eval_files=()) == C.default_config("wide_deep")
    assert cfg.task == CensusConfig()
    # The census task's tuned defaults, unchanged since the trainer trained census only.
    assert (cfg.num_epochs, cfg.train_batch_size, cfg.eval_batch_size) == (8, 256, 1024)
    assert cfg.learning_rate == 0.003
    assert (cfg.export_format, cfg.hypertune_metric) == ("JSON", "accuracy")
    assert C.TrainerConfig().learning_rate != cfg.learning_rate  # the generic default, overridden by the task
    assert C.resolve_config(BASE + ["--num-epochs", "3"]).num_epochs == 3  # a flag beats the task's default


def test_census_flags_keep_their_names_defaults_and_help():
    parser = C.build_parser("wide_deep")
    got = {a.dest: (a.default, a.help % {"default": a.default} if a.help else None) for a in parser._actions}
    assert got["embedding_size"] == (8, "width of categorical embeddings (default 8)")
    assert got["first_layer_size"] == (128, "width of the first hidden layer (default 128)")
    assert got["num_layers"] == (3, "number of hidden layers (default 3)")
    assert got["scale_factor"] == (0.5, "each hidden layer is this times the previous one (default 0.5)")
    assert got["dropout"] == (0.1, "dropout rate after each hidden layer (default 0.1)")
    assert got["learning_rate"] == (0.003, "Adam learning rate (default 0.003)")
    assert got["max_bad_rows"][0] == 0 and got["max_bad_rows"][1].endswith("instead of stopping at the first "
                                                                           "(default 0)")
    assert got["export_format"] == (
        "JSON", "serving signature of the SavedModel: JSON (raw feature dict), CSV (a raw data line) or "
                "EXAMPLE (serialized tf.Example) (default JSON)")


def test_layer_sizes_never_below_two():
    assert CensusConfig(first_layer_size=10, num_layers=4, scale_factor=0.1).layer_sizes() == (10, 2, 2, 2)


def test_hparams_are_generic_plus_the_tasks():
    assert C.default_config().hparams() == {
        "model": "wide_deep", "num_epochs": 8, "train_batch_size": 256, "learning_rate": 0.003, "seed": 42,
        "embedding_size": 8, "first_layer_size": 128, "num_layers": 3, "scale_factor": 0.5, "dropout": 0.1,
        "numeric_bins": 64, "numeric_embedding_size": 16}


@pytest.mark.parametrize("argv, flag", [
    (["--train-batch-size", "-5"], "--train-batch-size"),
    (["--eval-batch-size", "0"], "--eval-batch-size"),
    (["--num-layers", "0"], "--num-layers"),
    (["--num-epochs", "0"], "--num-epochs"),
    (["--dropout", "1.0"], "--dropout"),
    (["--scale-factor", "0"], "--scale-factor"),
    (["--numeric-bins", "-1"], "--numeric-bins"),
    (["--numeric-bins", "257"], "--numeric-bins"),
    (["--numeric-bins", "16.5"], "--numeric-bins"),
    (["--numeric-embedding-size", "0"], "--numeric-embedding-size"),
    (["--learning-rate", "-1"], "--learning-rate"),
    (["--learning-rate", "inf"], "--learning-rate"),  # finite only: inf would train into NaN weights
    (["--learning-rate", "nan"], "--learning-rate"),
    (["--max-bad-rows", "-1"], "--max-bad-rows"),
    (["--steps-per-epoch", "0"], "--steps-per-epoch"),
    (["--model", "resnet"], "--model"),
    (["--model"], "--model"),
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
    spec = load_spec("wide_deep")
    assert spec.reportable_metrics == ("accuracy", "auc", "loss", "train_accuracy", "train_auc", "train_loss")
    assert {keras_log_key(t) for t in spec.reportable_metrics} == {
        "val_accuracy", "val_auc", "val_loss", "accuracy", "auc", "loss"}
    goals = spec.metric_goals
    assert goals["loss"] == goals["train_loss"] == "MINIMIZE"
    assert goals["accuracy"] == goals["train_auc"] == "MAXIMIZE"
    assert spec.default_metric == "accuracy" and tuple(spec.export_formats) == ("JSON", "CSV", "EXAMPLE")


def test_config_json_rejects_unknown_keys():
    raw = json.loads(C.resolve_config(BASE).to_json())
    raw["bogus"] = 1
    with pytest.raises(C.ConfigError, match="bogus"):
        C.config_from_json(json.dumps(raw))
    raw = json.loads(C.resolve_config(BASE).to_json())
    raw["task"]["bogus"] = 1
    with pytest.raises(C.ConfigError, match="task.bogus"):
        C.config_from_json(json.dumps(raw))


def test_config_json_nests_the_task_and_reads_the_flat_census_layout():
    cfg = C.resolve_config(BASE + ["--num-layers", "2", "--max-bad-rows", "3"])
    raw = json.loads(cfg.to_json())
    assert raw["task"]["num_layers"] == 2 and "num_layers" not in raw
    # trainer_config.json of models trained before tasks had their own settings: census fields at the top.
    flat = {k: v for k, v in raw.items() if k != "task"} | raw["task"]
    assert C.config_from_json(json.dumps(flat)) == cfg
