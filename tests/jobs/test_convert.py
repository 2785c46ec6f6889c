"""`run_job.py convert`: legacy AI Platform Training configs and submit scripts -> job definitions.

Each mapping row is a legacy snippet and what the converted job must say; every conversion is also compiled
and validated by the command itself (as --dry-run would) before it prints. The legacy census sample converts,
matches its golden file, dry-runs, and (shrunk to its smallest BASIC form) runs its 2-trial study locally.
"""

from __future__ import annotations

import json
import os
import textwrap

import pytest
import yaml

from tests.jobs.helpers import OUTPUTS, REPO_ROOT, run_cli

LEGACY = REPO_ROOT / "tests" / "jobs" / "legacy"
GOLDEN = REPO_ROOT / "tests" / "jobs" / "golden"
BUCKET = "gs://demo-project-data"
DATA = f"{BUCKET}/census"
ARGS = ["--", f"--train-files={DATA}/adult.data", f"--eval-files={DATA}/adult.test"]


def convert(*argv):
    return run_cli(["convert", *map(str, argv)], outputs=OUTPUTS)


def convert_text(tmp_path, text, *argv, name="config.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    rc, out, err = convert(path, *argv)
    return rc, (yaml.safe_load(out) if rc == 0 else None), out, err


def pools(definition):
    spec = definition.get("jobSpec") or definition["trialJobSpec"]
    return spec["workerPoolSpecs"]


def machines(definition):
    return [
        (
            p["replicaCount"],
            p["machineSpec"]["machineType"],
            p["machineSpec"].get("acceleratorType"),
            p["machineSpec"].get("acceleratorCount"),
        )
        for p in pools(definition)
    ]


MACHINE_CASES = [
    ("{scaleTier: BASIC}", [(1, "n1-standard-4", None, None)]),
    ("{}", [(1, "n1-standard-4", None, None)]),  # legacy's default tier
    ("{scaleTier: BASIC_GPU}", [(1, "n1-standard-4", "NVIDIA_TESLA_T4", 1)]),
    ("{scaleTier: BASIC_TPU}", [(1, "cloud-tpu", "TPU_V2", 8)]),
    ("{scaleTier: STANDARD_1}", [(1, "n1-highcpu-16", None, None), (4, "n1-highcpu-16", None, None)]),
    ("{scaleTier: PREMIUM_1}", [(1, "n1-highcpu-32", None, None), (19, "n1-highcpu-32", None, None)]),
    ("{scaleTier: CUSTOM, masterType: standard}", [(1, "n1-standard-4", None, None)]),
    ("{scaleTier: CUSTOM, masterType: large_model}", [(1, "n1-highmem-8", None, None)]),
    ("{scaleTier: CUSTOM, masterType: complex_model_s}", [(1, "n1-highcpu-16", None, None)]),
    ("{scaleTier: CUSTOM, masterType: complex_model_l}", [(1, "n1-highcpu-32", None, None)]),
    ("{scaleTier: CUSTOM, masterType: standard_gpu}", [(1, "n1-standard-4", "NVIDIA_TESLA_T4", 1)]),
    # 8 retired K80s -> 4 T4s: the most an N1 VM takes.
    ("{scaleTier: CUSTOM, masterType: complex_model_l_gpu}", [(1, "n1-highcpu-32", "NVIDIA_TESLA_T4", 4)]),
    ("{scaleTier: CUSTOM, masterType: standard_p100}", [(1, "n1-standard-4", "NVIDIA_TESLA_P100", 1)]),
    ("{scaleTier: CUSTOM, masterType: large_model_v100}", [(1, "n1-highmem-8", "NVIDIA_TESLA_V100", 1)]),
    ("{scaleTier: CUSTOM, masterType: complex_model_l_v100}", [(1, "n1-highcpu-32", "NVIDIA_TESLA_V100", 8)]),
    (
        "{scaleTier: CUSTOM, masterType: complex_model_m_gpu, workerType: complex_model_m_gpu,"
        " workerCount: 9}",
        [(1, "n1-highcpu-16", "NVIDIA_TESLA_T4", 4), (9, "n1-highcpu-16", "NVIDIA_TESLA_T4", 4)],
    ),
    (
        "{scaleTier: CUSTOM, masterType: n1-standard-8,"
        " masterConfig: {acceleratorConfig: {count: 2, type: NVIDIA_TESLA_P100}}}",
        [(1, "n1-standard-8", "NVIDIA_TESLA_P100", 2)],
    ),
    (
        "{scaleTier: CUSTOM, masterType: n1-highmem-16,"
        " masterConfig: {acceleratorConfig: {count: '2', type: NVIDIA_TESLA_K80}}}",
        [(1, "n1-highmem-16", "NVIDIA_TESLA_T4", 2)],
    ),
    (
        "{scaleTier: CUSTOM, masterType: standard, workerType: cloud_tpu, workerCount: 1,"
        " workerConfig: {acceleratorConfig: {count: 8, type: TPU_V3}}}",
        [(1, "cloud-tpu", "TPU_V3", 8)],
    ),
    # Parameter servers and evaluators are reported, not created: the trainer has no use for them.
    (
        "{scaleTier: CUSTOM, masterType: standard, parameterServerType: large_model, parameterServerCount: 2,"
        " evaluatorType: standard, evaluatorCount: 1}",
        [(1, "n1-standard-4", None, None)],
    ),
]


@pytest.mark.parametrize("training, expected", MACHINE_CASES, ids=[c[0] for c in MACHINE_CASES])
def test_machines_map_to_vertex_specs_that_exist(tmp_path, training, expected):
    rc, definition, _, err = convert_text(tmp_path, f"trainingInput: {training}\n", *ARGS)
    assert rc == 0, err
    assert machines(definition) == expected
    variant = "tpu" if expected[0][1] == "cloud-tpu" else "gpu" if expected[0][2] else "cpu"
    program = pools(definition)[0]["containerSpec"]
    assert program["imageUri"] == f"${{infra.trainer_image}}:{variant}-${{job.image_tag}}"
    assert ("--distribution=tpu" in program["args"]) == (variant == "tpu")
    # Every pool runs the same trainer command (MultiWorkerMirroredStrategy needs the same args everywhere).
    assert all(p["containerSpec"] == program for p in pools(definition))


def test_retired_gpu_and_dropped_pools_are_explained(tmp_path):
    rc, _, out, err = convert_text(
        tmp_path,
        """
        trainingInput:
          scaleTier: CUSTOM
          masterType: complex_model_l_gpu
          parameterServerType: large_model
          parameterServerCount: 3
          evaluatorType: standard
          evaluatorCount: 1
        """,
        *ARGS,
    )
    assert rc == 0, err
    header = _header(out)
    assert "NVIDIA_TESLA_K80 -> NVIDIA_TESLA_T4" in header and "8 x NVIDIA_TESLA_K80 -> 4" in header
    assert "parameterServerCount (line 6): 3 x large_model parameter servers (pool 2)" in header
    assert "MultiWorkerMirroredStrategy" in header and "ignores parameter servers" in header
    assert "a pool 2 running this trainer would fail the job" in header
    assert "evaluatorCount (line 8): 1 x standard evaluators (pool 3)" in header
    assert "not carried over: trainingInput.parameterServerCount" in err


def test_disk_config_becomes_the_pool_disk_spec(tmp_path):
    rc, definition, _, err = convert_text(
        tmp_path,
        """
        trainingInput:
          scaleTier: CUSTOM
          masterType: standard
          masterConfig: {diskConfig: {bootDiskType: pd-standard, bootDiskSizeGb: 200}}
        """,
        *ARGS,
    )
    assert rc == 0, err
    assert pools(definition)[0]["diskSpec"] == {"bootDiskType": "pd-standard", "bootDiskSizeGb": 200}


STUDY = """
trainingInput:
  hyperparameters:
    goal: {goal}
    maxTrials: 6
    maxParallelTrials: 3
    maxFailedTrials: 2
    {extra}
    params:
      - {param}
"""
PARAM_CASES = [
    (
        "{parameterName: first-layer-size, type: INTEGER, minValue: 50, maxValue: 500,"
        " scaleType: UNIT_LOG_SCALE}",
        {
            "parameterId": "first-layer-size",
            "integerValueSpec": {"minValue": 50, "maxValue": 500},
            "scaleType": "UNIT_LOG_SCALE",
        },
    ),
    (
        "{parameterName: scale-factor, type: DOUBLE, minValue: 0.1, maxValue: 1,"
        " scaleType: UNIT_REVERSE_LOG_SCALE}",
        {
            "parameterId": "scale-factor",
            "doubleValueSpec": {"minValue": 0.1, "maxValue": 1},
            "scaleType": "UNIT_REVERSE_LOG_SCALE",
        },
    ),
    (
        "{parameterName: learning-rate, type: DISCRETE, discreteValues: [0.001, 0.01], scaleType: NONE}",
        {"parameterId": "learning-rate", "discreteValueSpec": {"values": [0.001, 0.01]}},
    ),
    # Vertex AI writes DISCRETE values as doubles (--num-layers=2.0), which an integer flag refuses.
    (
        "{parameterName: num-layers, type: DISCRETE, discreteValues: [1, 2, 4]}",
        {"parameterId": "num-layers", "categoricalValueSpec": {"values": ["1", "2", "4"]}},
    ),
    (
        "{parameterName: distribution, type: CATEGORICAL, categoricalValues: [auto, default]}",
        {"parameterId": "distribution", "categoricalValueSpec": {"values": ["auto", "default"]}},
    ),
    # The tf-keras census sample's name for the training batch.
    (
        "{parameterName: batch-size, type: INTEGER, minValue: 8, maxValue: 256,"
        " scaleType: UNIT_LINEAR_SCALE}",
        {
            "parameterId": "train-batch-size",
            "integerValueSpec": {"minValue": 8, "maxValue": 256},
            "scaleType": "UNIT_LINEAR_SCALE",
        },
    ),
]


@pytest.mark.parametrize("param, expected", PARAM_CASES, ids=[c[1]["parameterId"] for c in PARAM_CASES])
def test_parameters_map_to_value_specs(tmp_path, param, expected):
    text = STUDY.format(goal="MAXIMIZE", extra="hyperparameterMetricTag: auc", param=param)
    rc, definition, _, err = convert_text(tmp_path, text, *ARGS)
    assert rc == 0, err
    assert definition["kind"] == "HyperparameterTuningJob"
    assert definition["studySpec"]["parameters"] == [expected]
    assert definition["studySpec"]["metrics"] == [{"metricId": "auc", "goal": "MAXIMIZE"}]
    assert (
        definition["maxTrialCount"],
        definition["parallelTrialCount"],
        definition["maxFailedTrialCount"],
    ) == (
        6,
        3,
        2,
    )
    assert "--hypertune-metric=auc" in pools(definition)[0]["containerSpec"]["args"]


@pytest.mark.parametrize("algorithm", ["ALGORITHM_UNSPECIFIED", "GRID_SEARCH", "RANDOM_SEARCH"])
def test_algorithms_carry_over(tmp_path, algorithm):
    param = "{parameterName: num-layers, type: INTEGER, minValue: 1, maxValue: 3}"
    text = STUDY.format(goal="MAXIMIZE", extra=f"algorithm: {algorithm}", param=param)
    rc, definition, out, err = convert_text(tmp_path, text, *ARGS)
    assert rc == 0, err
    assert definition["studySpec"]["algorithm"] == algorithm
    # No tag: the legacy default tag meant nothing to this trainer; its default metric is used, and said so.
    assert definition["studySpec"]["metrics"] == [{"metricId": "accuracy", "goal": "MAXIMIZE"}]
    assert "hyperparameterMetricTag unset -> accuracy" in _header(out)


@pytest.mark.parametrize(
    "tag, goal, metric",
    [
        ("epoch_accuracy", "MAXIMIZE", "accuracy"),  # the tf-keras census sample's TensorBoard tag
        ("epoch_acc", "MAXIMIZE", "accuracy"),  # the same, TF < 2.2
        ("val_accuracy", "MAXIMIZE", "accuracy"),
        ("val_acc", "MAXIMIZE", "accuracy"),
        ("epoch_loss", "MINIMIZE", "loss"),
        ("val_auc", "MAXIMIZE", "auc"),
        ("train_auc", "MAXIMIZE", "train_auc"),  # the trainer's own name: as it is
    ],
)
def test_keras_metric_tags_become_the_trainers_metric(tmp_path, tag, goal, metric):
    param = "{parameterName: num-layers, type: INTEGER, minValue: 1, maxValue: 3}"
    text = STUDY.format(goal=goal, extra=f"hyperparameterMetricTag: {tag}", param=param)
    rc, definition, out, err = convert_text(tmp_path, text, *ARGS)
    assert rc == 0, err
    assert definition["studySpec"]["metrics"] == [{"metricId": metric, "goal": goal}]
    assert f"--hypertune-metric={metric}" in pools(definition)[0]["containerSpec"]["args"]
    assert (f"hyperparameterMetricTag {tag}, Keras' name for {metric}" in _header(out)) == (tag != metric)


def test_a_legacy_samples_flag_becomes_the_trainers_name_for_it(tmp_path):
    text = f"trainingInput:\n  args: [--batch-size=128, --epochs, '3', --train-files={DATA}/adult.data]\n"
    rc, definition, out, err = convert_text(tmp_path, text, "--", f"--eval-files={DATA}/adult.test")
    assert rc == 0, err
    args = pools(definition)[0]["containerSpec"]["args"]
    assert "--train-batch-size=128" in args and args[args.index("--num-epochs") + 1] == "3"
    assert "args --batch-size -> --train-batch-size: this trainer's name for it" in _header(out)
    # Only where the trainer lacks the legacy name: an unknown one stays reported, not renamed.
    text = text.replace("--epochs", "--train-steps")
    rc, definition, out, err = convert_text(tmp_path, text, "--", f"--eval-files={DATA}/adult.test")
    assert rc == 0, err
    assert "--train-steps 3: not a flag of the trainer's wide_deep model" in _header(out)


def test_the_legacy_census_script_converts_to_its_golden_file(tmp_path):
    """The sample's submit script: continuations, VAR=value, $(date ...), --config beside it, user args."""
    target = tmp_path / "census_legacy.yaml"
    script = LEGACY / "train_hptuning.sh"
    rc, out, err = convert(script.relative_to(REPO_ROOT), "-o", target)
    assert rc == 0, err
    text = target.read_text(encoding="utf-8").replace(str(target), "jobs/census_legacy.yaml")
    golden = GOLDEN / "legacy_census.yaml"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        golden.write_text(text, encoding="utf-8")
    assert text == golden.read_text(encoding="utf-8")
    definition = yaml.safe_load(text)
    args = pools(definition)[0]["containerSpec"]["args"]
    # The user args after `--`, with the data bucket written as the environment's reference.
    assert args[:5] == [
        "--model=wide_deep",
        "--train-files",
        "${infra.data_bucket}/census/adult.data",
        "--eval-files",
        "${infra.data_bucket}/census/adult.test",
    ]
    assert "--train-steps" not in args and "--train-steps 1000: not a flag" in err
    # The per-run folder named after $JOB_NAME (census_$(date ...)) is the Vertex AI job id.
    assert definition["trialJobSpec"]["baseOutputDirectory"] == {
        "outputUriPrefix": "${infra.models_bucket}/${job.id}"
    }
    assert machines(definition) == [
        (1, "n1-highcpu-16", "NVIDIA_TESLA_T4", 4),
        (9, "n1-highcpu-16", "NVIDIA_TESLA_T4", 4),
    ]
    rc, out, err = run_cli([target, "--dry-run"], outputs=OUTPUTS)
    assert rc == 0, err
    assert json.loads(out)["hyperparameterTuningJob"]["maxTrialCount"] == 4


def test_command_line_flags_override_the_config_as_gcloud_did(tmp_path):
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "config.yaml").write_text(
        "trainingInput: {scaleTier: BASIC, args: [--num-epochs=3], jobDir: gs://demo-project-models/x}\n"
        "labels: {team: old}\n",
        encoding="utf-8",
    )
    script = tmp_path / "submit"
    script.write_text(
        "#!/bin/sh\n"
        "CONF=conf/config.yaml\n"
        "gcloud beta ml-engine jobs submit training job_1 --config=$CONF --scale-tier basic-gpu \\\n"
        "  --labels=team=new,stage=dev --job-dir gs://demo-project-models/runs\n",
        encoding="utf-8",
    )
    rc, out, err = convert(
        script, "--", f"--train-files={DATA}/adult.data", f"--eval-files={DATA}/adult.test"
    )
    assert rc == 0, err
    definition = yaml.safe_load(out)
    assert machines(definition) == [(1, "n1-standard-4", "NVIDIA_TESLA_T4", 1)]  # --scale-tier won
    assert definition["labels"] == {
        "team": "new",
        "stage": "dev",
        "app": "wide-deep",
        "migrated-from": "ai-platform",
    }
    assert (
        definition["jobSpec"]["baseOutputDirectory"]["outputUriPrefix"]
        == "${infra.models_bucket}/runs/${job.id}"
    )
    # No `--` in the script: the config's args stay, and convert's own args are added.
    assert pools(definition)[0]["containerSpec"]["args"][:2] == ["--model=wide_deep", "--num-epochs=3"]


def test_a_bare_double_dash_clears_the_configs_args_as_gcloud_did(tmp_path):
    (tmp_path / "config.yaml").write_text(
        "trainingInput:\n"
        "  scaleTier: BASIC\n"
        f"  args: [--train-files={DATA}/adult.data, --eval-files={DATA}/adult.test]\n",
        encoding="utf-8",
    )
    script = tmp_path / "submit.sh"
    command = "gcloud ai-platform jobs submit training j --config config.yaml --job-dir gs://bkt/out"
    script.write_text(command + "\n", encoding="utf-8")
    rc, out, err = convert(script)
    assert rc == 0, err
    args = pools(yaml.safe_load(out))[0]["containerSpec"]["args"]
    assert "--train-files=${infra.data_bucket}/census/adult.data" in args

    script.write_text(command + " --\n", encoding="utf-8")
    rc, out, err = convert(script)
    assert rc == 2 and out == ""
    assert "--train-files" in err and "--eval-files" in err and len(err.strip().splitlines()) == 1


def test_script_variables_can_come_from_the_command_line(tmp_path):
    script = tmp_path / "submit.sh"
    script.write_text(
        "gcloud ai-platform jobs submit training j --job-dir gs://$BUCKET/out -- "
        f"--train-files={DATA}/adult.data --eval-files={DATA}/adult.test\n",
        encoding="utf-8",
    )
    rc, out, err = convert(script)
    assert (
        rc == 2
        and "--job-dir: gs://$BUCKET/out: $BUCKET (in the bucket) is not assigned in the script" in err
    )
    assert "allowed: run_job.py convert FILE --var BUCKET=VALUE" in err
    rc, out, err = convert(script, "--var", "BUCKET=demo-project-models")
    assert rc == 0, err
    assert "${infra.models_bucket}/out/${job.id}" in out


def script_args(tmp_path, text, *argv):
    """Convert a submit script; (exit status, the trainer args of pool 0 or None, stderr)."""
    script = tmp_path / "submit.sh"
    script.write_text(textwrap.dedent(text), encoding="utf-8")
    rc, out, err = convert(script, *argv)
    return rc, (pools(yaml.safe_load(out))[0]["containerSpec"]["args"] if rc == 0 else None), err


def test_one_refusal_names_every_variable_the_script_expects_from_its_environment(tmp_path):
    text = f"""\
        JOB_NAME=census_$(date +%Y%m%d_%H%M%S)
        gcloud ai-platform jobs submit training $JOB_NAME \\
            --region ${{REGION}} --runtime-version=$RUNTIME_VERSION --scale-tier BASIC \\
            -- --train-files=gs://${{BUCKET}}/census/adult.data --eval-files={DATA}/adult.test
        """
    rc, _, err = script_args(tmp_path, text)
    assert rc == 2 and err.count("\n") == 1
    assert (
        "--region: ${REGION} is not assigned in the script, known only when the script runs (line 3)" in err
    )
    assert "the command also needs $RUNTIME_VERSION, $BUCKET;" in err
    assert "--var REGION=VALUE --var RUNTIME_VERSION=VALUE --var BUCKET=VALUE" in err
    given = [
        "--var",
        "REGION=europe-west4",
        "--var",
        "RUNTIME_VERSION=2.11",
        "--var",
        "BUCKET=demo-project-data",
    ]
    rc, args, err = script_args(tmp_path, text, *given)
    assert rc == 0, err
    assert "--train-files=${infra.data_bucket}/census/adult.data" in args


def test_a_given_variable_wins_over_the_scripts_own_assignment(tmp_path):
    # The samples' PROJECT_ID=$(gcloud config list project ...): only the caller knows what it printed.
    text = f"""\
        export PROJECT_ID=$(gcloud config list project --format "value(core.project)")
        DATA=gs://${{PROJECT_ID}}-data/census
        gcloud ai-platform jobs submit training j --scale-tier BASIC \\
            -- --train-files=$DATA/adult.data --eval-files={DATA}/adult.test
        """
    rc, _, err = script_args(tmp_path, text)
    assert rc == 2
    assert '$(gcloud config list project --format "value(core.project)") is a command substitution' in err
    assert "--var PROJECT_ID=VALUE" in err  # the variable to set, though the value came through $DATA
    rc, args, err = script_args(tmp_path, text, "--var", "PROJECT_ID=demo-project")
    assert rc == 0, err
    assert "--train-files=${infra.data_bucket}/census/adult.data" in args


def test_unquoted_expansions_split_into_words_and_empty_ones_vanish(tmp_path):
    text = f"""\
        WORKERS="--worker-count 2   --worker-machine-type n1-standard-8"
        NONE=
        gcloud ai-platform jobs submit training j --scale-tier CUSTOM --master-machine-type n1-standard-4 \\
            $WORKERS $NONE ${{NONE}} -- --train-files={DATA}/adult.data "--eval-files={DATA}/adult.test" $NONE
        """
    rc, out, err = convert(_write(tmp_path / "submit.sh", text))
    assert rc == 0, err
    assert machines(yaml.safe_load(out)) == [
        (1, "n1-standard-4", None, None),
        (2, "n1-standard-8", None, None),
    ]
    # Quoted, the expansion stays one word: no flag of gcloud's.
    rc, _, err = convert(_write(tmp_path / "submit.sh", text.replace("$WORKERS", '"$WORKERS"')))
    assert rc == 2 and ": --worker-count 2 --worker-machine-type n1-standard-8: not a flag of" in err
    # An assignment's value is not split: A=$WORKERS keeps every word.
    text = text.replace("NONE=\n", "NONE=\n        A=$WORKERS\n").replace(" $WORKERS ", " $A ")
    rc, out, err = convert(_write(tmp_path / "submit.sh", text))
    assert rc == 0, err
    assert machines(yaml.safe_load(out))[1] == (2, "n1-standard-8", None, None)


def test_a_value_set_in_a_branch_is_known_only_inside_it(tmp_path):
    # The horovod sample: flags held in a variable that an if/else sets, expanded unquoted.
    text = f"""\
        MACHINE_TYPE=n1-standard-8
        if [ "${{MACHINE_COUNT}}" -gt "1" ]; then
            WORKER_CONFIG="--worker-count $((MACHINE_COUNT - 1)) --worker-machine-type ${{MACHINE_TYPE}}"
        else
            WORKER_CONFIG=""
        fi
        case "$GPU" in
          yes) TIER=BASIC_GPU; gcloud ai-platform jobs submit training j --scale-tier $TIER \\
                 ${{WORKER_CONFIG}} -- --train-files={DATA}/adult.data --eval-files={DATA}/adult.test ;;
          *) TIER=BASIC ;;
        esac
        """
    rc, _, err = script_args(tmp_path, text)
    assert rc == 2 and err.count("\n") == 1
    assert (
        "(command): $WORKER_CONFIG is assigned inside `if` (line 2), known only when the script runs" in err
    )
    assert "--var WORKER_CONFIG=VALUE" in err
    # Given (empty here, one machine), the rest converts: TIER is the value its own branch set.
    rc, out, err = convert(tmp_path / "submit.sh", "--var", "WORKER_CONFIG=")
    assert rc == 0, err
    assert machines(yaml.safe_load(out)) == [(1, "n1-standard-4", "NVIDIA_TESLA_T4", 1)]
    # Outside the case, TIER depends on the branch taken; assigned again after it, it is known.
    after = (
        "gcloud ai-platform jobs submit training j --scale-tier $TIER -- " + ARGS[1] + " " + ARGS[2] + "\n"
    )
    body = text.split("case")[0]
    rc, _, err = convert(_write(tmp_path / "submit.sh", body + "if true; then TIER=BASIC_GPU; fi\n" + after))
    assert rc == 2 and "$TIER is assigned inside `if` (line 7), known only when the script runs" in err
    rc, out, err = convert(
        _write(tmp_path / "submit.sh", body + "if true; then TIER=X; fi\nTIER=BASIC\n" + after)
    )
    assert rc == 0, err
    assert machines(yaml.safe_load(out)) == [(1, "n1-standard-4", None, None)]


def test_a_script_finds_its_config_where_gcloud_read_it(tmp_path, monkeypatch):
    # The samples keep config.yaml beside their scripts/ folder and run `./scripts/train-cloud.sh`.
    (tmp_path / "scripts").mkdir()
    (tmp_path / "config.yaml").write_text("trainingInput: {scaleTier: BASIC_GPU}\n", encoding="utf-8")
    script = _write(
        tmp_path / "scripts" / "train-cloud.sh",
        "gcloud ai-platform jobs submit training j --config ./config.yaml -- " + " ".join(ARGS[1:]) + "\n",
    )
    monkeypatch.chdir(tmp_path / "scripts")
    rc, _, err = convert(script)
    assert rc == 2 and err.count("\n") == 1
    assert f"--config: ./config.yaml: no such file in {tmp_path / 'scripts'} (line 1)" in err
    assert "run convert in the folder the script ran in" in err
    monkeypatch.chdir(tmp_path)
    rc, out, err = convert(script)
    assert rc == 0, err
    assert machines(yaml.safe_load(out)) == [(1, "n1-standard-4", "NVIDIA_TESLA_T4", 1)]
    assert "read from config.yaml: not beside the script, so from the folder convert ran in" in _header(out)


def test_an_image_only_the_script_could_name_is_reported_not_refused(tmp_path):
    rc, out, err = convert(
        _write(
            tmp_path / "submit.sh",
            f"""\
        PROJECT_ID=$(gcloud config get-value project)
        gcloud ai-platform jobs submit training j --scale-tier BASIC \\
          --master-image-uri gcr.io/$PROJECT_ID/trainer:latest -- {" ".join(ARGS[1:])}
        """,
        )
    )
    assert rc == 0, err
    assert (
        "gcr.io/$(gcloud config get-value project)/trainer:latest (Container Registry, gcr.io, is shut down)"
        in _header(out)
    )


def _write(path, text):
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def test_strict_refuses_what_cannot_be_carried_over(tmp_path):
    text = """
    trainingInput:
      runtimeVersion: "1.15"
      pythonVersion: "2.7"
      masterConfig: {imageUri: gcr.io/old-project/trainer:latest}
      scaleTier: CUSTOM
      masterType: standard
      useChiefInTfConfig: true
      scheduling: {maxRunningTime: 7200s, priority: 5}
    """
    rc, definition, out, err = convert_text(tmp_path, text, *ARGS)
    assert rc == 0, err
    header = _header(out)
    for found in (
        "runtime 1.15 ran TensorFlow 1.x",
        "Python 2.7",
        "Container Registry, gcr.io, is shut down",
        "useChiefInTfConfig",
        "scheduling.priority",
    ):
        assert found in header
    assert definition["jobSpec"]["scheduling"] == {"timeout": "7200s"}
    target = tmp_path / "out.yaml"
    rc, out, err = convert(tmp_path / "config.yaml", "--strict", "-o", target, *ARGS)
    assert rc == 2
    assert err.count("\n") == 1 and "trainingInput.runtimeVersion: cannot be carried over" in err
    assert "(line 3)" in err and "(and 4 more)" in err
    assert not target.exists()


def test_the_full_job_resource_in_json_with_tabs(tmp_path):
    job = {
        "jobId": "census_20190101",
        "state": "SUCCEEDED",
        "createTime": "2019-01-01T00:00:00Z",
        "labels": {"team": "ml"},
        "trainingInput": {
            "scaleTier": "BASIC",
            "args": ARGS[1:],
            "workerCount": "0",
            "region": "europe-west4",
        },
        "trainingOutput": {"consumedMLUnits": 1.2},
    }
    rc, definition, out, err = convert_text(tmp_path, json.dumps(job, indent="\t"), name="job.json")
    assert rc == 0, err
    assert definition["labels"]["team"] == "ml"
    assert "(job census_20190101)" in out
    assert "region europe-west4 -> the environment's region us-central1" in _header(out)


def test_the_prebuilt_delivery(tmp_path):
    rc, definition, _, err = convert_text(
        tmp_path, "scaleTier: BASIC_GPU\n", "--delivery", "python-package", *ARGS
    )
    assert rc == 0, err
    assert definition["trainer"] == {"delivery": "python-package"}
    assert pools(definition)[0]["pythonPackageSpec"] == {
        "executorImageUri": "us-docker.pkg.dev/vertex-ai/training/tf-gpu.2-17.py310:latest",
        "packageUris": ["${job.package_uri}"],
        "pythonModule": "trainer.task",
        "args": [
            "--model=wide_deep",
            "--train-files=${infra.data_bucket}/census/adult.data",
            "--eval-files=${infra.data_bucket}/census/adult.test",
        ],
    }


def test_output_is_written_once_and_never_over_a_file_by_accident(tmp_path):
    (tmp_path / "config.yaml").write_text("scaleTier: BASIC\n", encoding="utf-8")
    target = tmp_path / "out.yaml"
    target.write_text("mine\n", encoding="utf-8")
    rc, _, err = convert(tmp_path / "config.yaml", "-o", target, *ARGS)
    assert rc == 2 and "exists" in err and target.read_text() == "mine\n"
    rc, _, err = convert(tmp_path / "config.yaml", "-o", target, "--force", *ARGS)
    assert rc == 0, err
    assert target.read_text().startswith("# Converted from legacy AI Platform Training")
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".out.yaml")] == []


BAD_INPUT = [
    # (file text, the error line's parts)
    (
        "trainingInput:\n  scaleTier: CUSTOM\n\tmasterType: standard\n",
        ["line 3: tab character in indentation"],
    ),
    ("trainingInput: {scaleTier: CUSTOM\n", ["malformed YAML"]),
    (
        "trainingInput:\n  scaleTier: CUSTOM\n  masterType: huge_model\n",
        ["trainingInput.masterType", "huge_model", "(line 3)", "complex_model_m_gpu"],
    ),
    ("trainingInput:\n  scaleTier: CUSTOM\n", ["trainingInput.masterType: missing"]),
    (
        "trainingInput:\n  scaleTier: MEGA\n",
        ["trainingInput.scaleTier: unknown value 'MEGA' (line 2)", "PREMIUM_1"],
    ),
    ("scaleTier: BASIC\nmasterType: standard\n", ["masterType: is set but scaleTier is BASIC (line 2)"]),
    (
        "scaleTier: CUSTOM\nmasterType: standard\nworkerCount: -1\nworkerType: standard\n",
        ["workerCount: -1 is not a possible count (line 3)"],
    ),
    (
        "scaleTier: CUSTOM\nmasterType: standard\nworkerCount: 2\n",
        ["workerCount: 2 workers but no workerType"],
    ),
    (
        "scaleTier: CUSTOM\nmasterType: standard\n"
        "masterConfig: {acceleratorConfig: {type: NVIDIA_TESLA_H9, count: 1}}\n",
        ["masterConfig.acceleratorConfig.type: unknown value"],
    ),
    (
        "scaleTier: BASIC_TPU\nworkerConfig: {acceleratorConfig: {type: TPU_V3, count: 32}}\n",
        ["count: 32 TPU cores"],
    ),
    (
        "scaleTier: BASIC\nmasterTipe: standard\n",
        ["masterTipe: not a field of a legacy TrainingInput (line 2)"],
    ),
    ("workerPoolSpecs: []\n", ["a Vertex AI definition?"]),
    ("predictionInput: {}\n", ["a batch prediction job"]),
    ("runtimeVersion: latest\n", ["runtimeVersion: 'latest' is not a runtime version"]),
    ("jobDir: /home/me/out\n", ["jobDir: '/home/me/out' is not a gs:// URI (line 1)"]),
    ("scheduling: {maxRunningTime: 2h}\n", ["scheduling.maxRunningTime: '2h' is not a duration"]),
    (
        STUDY.format(
            goal="MAXIMIZE", extra="", param="{parameterName: lr, type: DOUBLE, minValue: 0.1, maxValue: 1}"
        ),
        [
            "params.0.parameterName: --lr is not a flag of the trainer's wide_deep model (line 10)",
            "learning-rate",
        ],
    ),
    (
        STUDY.format(
            goal="MAXIMIZE",
            extra="",
            param="{parameterName: learning-rate, type: DOUBLE, minValue: 1, maxValue: 0.1}",
        ),
        ["params.0.minValue: minValue 1.0 >= maxValue 0.1", "allowed: minValue < maxValue"],
    ),
    (
        STUDY.format(
            goal="MAXIMIZE",
            extra="",
            param="{parameterName: learning-rate, type: DOUBLE, minValue: 0, maxValue: 1,"
            " scaleType: UNIT_LOG_SCALE}",
        ),
        ["params.0.minValue: UNIT_LOG_SCALE with minValue 0.0", "allowed: minValue > 0 on a log scale"],
    ),
    (
        STUDY.format(
            goal="MAXIMIZE",
            extra="algorithm: GRID_SEARCH",
            param="{parameterName: learning-rate, type: DOUBLE, minValue: 0.1, maxValue: 1}",
        ),
        ["params.0.type: GRID_SEARCH cannot enumerate the DOUBLE parameter 'learning-rate'"],
    ),
    (
        STUDY.format(
            goal="MINIMIZE",
            extra="hyperparameterMetricTag: accuracy",
            param="{parameterName: num-layers, type: INTEGER, minValue: 1, maxValue: 3}",
        ),
        ["goal: MINIMIZE accuracy tunes toward a worse model"],
    ),
    (
        STUDY.format(
            goal="MAXIMIZE",
            extra="hyperparameterMetricTag: epoch_precision",
            param="{parameterName: num-layers, type: INTEGER, minValue: 1, maxValue: 3}",
        ),
        ["hyperparameterMetricTag: the wide_deep model reports no metric 'epoch_precision'", "auc"],
    ),
    (
        STUDY.format(
            goal="MAXIMIZE",
            extra="maxTrials: 0",
            param="{parameterName: num-layers, type: INTEGER, minValue: 1, maxValue: 3}",
        ),
        ["duplicate key"],
    ),
    (
        "hyperparameters: {goal: MAXIMIZE, maxTrials: 0,"
        " params: [{parameterName: num-layers, type: INTEGER, minValue: 1, maxValue: 3}]}\n",
        ["hyperparameters.maxTrials: maxTrialCount is 0"],
    ),
    ("scaleTier: BASIC\nargs: [--num-layers=0]\n", ["args: the trainer refuses them"]),
]


@pytest.mark.parametrize("text, parts", BAD_INPUT, ids=[str(i) for i in range(len(BAD_INPUT))])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, text, parts):
    path = tmp_path / "config.yaml"
    path.write_text(text, encoding="utf-8")
    target = tmp_path / "out.yaml"
    rc, out, err = convert(path, "-o", target, *ARGS)
    assert rc == 2, err
    assert out == "" and err.count("\n") == 1 and err.startswith(str(path))
    for part in parts:
        assert part in err
    assert not target.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["config.yaml"]


def test_a_config_without_data_paths_is_refused_naming_them(tmp_path):
    (tmp_path / "config.yaml").write_text("trainingInput: {scaleTier: BASIC}\n", encoding="utf-8")
    rc, _, err = convert(tmp_path / "config.yaml")
    assert rc == 2
    assert "trainingInput.args: the trainer needs --train-files" in err and "--eval-files" in err
    assert "run_job.py convert FILE -- --train-files=" in err


BAD_SCRIPTS = [
    ("echo hello\n", "no `gcloud ai-platform jobs submit training` command"),
    (
        "gcloud ai-platform jobs submit training a --region r\ngcloud ai-platform jobs submit training b\n",
        "line 2: 2 submit commands (lines 1, 2)",
    ),
    ("gcloud ai-platform jobs submit training a --regoin us-central1\n", "--regoin: not a flag of"),
    (
        "gcloud ai-platform jobs submit training a --worker-count many\n",
        "--worker-count: 'many' is not a count",
    ),
    (
        "gcloud ai-platform jobs submit training a --config missing.yaml\n",
        "--config: missing.yaml: no such file in",
    ),
    ("gcloud ai-platform jobs submit training a -- --train-files=$(ls)\n", "$(ls) is a command substitution"),
    ("gcloud ai-platform jobs submit training 'a\n", "unterminated ' quote"),
    (  # refused by the job validation, and named by the flag it came from
        "gcloud ai-platform jobs submit training a --job-dir gs://b/out -- "
        f"--train-files={DATA}/adult.data --eval-files={DATA}/adult.test\n",
        "submit.sh: --job-dir: 'gs://b/out/",
    ),
]


@pytest.mark.parametrize("text, part", BAD_SCRIPTS, ids=[str(i) for i in range(len(BAD_SCRIPTS))])
def test_bad_scripts_are_one_line(tmp_path, text, part):
    path = tmp_path / "submit.sh"
    path.write_text(text, encoding="utf-8")
    rc, out, err = convert(path, "-o", tmp_path / "out.yaml")
    assert rc == 2 and err.count("\n") == 1 and part in err, err
    assert not (tmp_path / "out.yaml").exists()


SUBMIT_REGION = "gcloud ai-platform jobs submit training j --scale-tier BASIC --region $REGION " + " ".join(
    ARGS
)
# What a script does to $REGION on line 2, between assigning it and submitting with it on line 3, that
# convert cannot follow: refused naming the construct, its line and the --var that gives the value.
UNFOLLOWED = [
    (". ./vars.sh", "possibly set by `. ./vars.sh` (line 2)"),
    ("source ./vars.sh", "possibly set by `source ./vars.sh` (line 2)"),
    ('eval "$(./env.sh)"', "possibly set by `eval $(./env.sh)` (line 2)"),
    ("read REGION", "set by `read REGION` (line 2)"),
    ('[ -n "$EU" ] && REGION=europe-west4', "assigned after `&&` (line 2)"),
    ('test -z "$EU" || REGION=europe-west4', "assigned after `||` (line 2)"),
    ("cd /srv && export REGION=europe-west4", "assigned after `&&` (line 2)"),
    ('[ -n "$EU" ] && unset REGION', "unset after `&&` (line 2)"),
    ("declare -l REGION=US-CENTRAL1", "set by `declare -l REGION=US-CENTRAL1` (line 2)"),
    ("mapfile -t REGION < regions.txt", "set by `mapfile -t REGION < regions.txt` (line 2)"),
    ("readarray REGION", "set by `readarray REGION` (line 2)"),
    ("getopts r: REGION", "set by `getopts r: REGION` (line 2)"),
    ("let REGION=1", "set by `let REGION=1` (line 2)"),
    ("(( REGION++ ))", "set by `(( REGION++ ))` (line 2)"),
    ("printf -v REGION '%s' europe-west4", "set by `printf -v REGION %s europe-west4` (line 2)"),
    ("for REGION in us-central1 europe-west4; do :; done", "assigned inside `for` (line 2)"),
    ("REGION=(us-central1 europe-west4)", "an array assignment (line 2)"),
]


def refused(tmp_path, text):
    """Convert a submit script that must be refused: exit 2, nothing printed or written. (path, stderr)"""
    path = _write(tmp_path / "submit.sh", text)
    rc, out, err = convert(path, "-o", tmp_path / "out.yaml")
    assert rc == 2 and out == "" and not (tmp_path / "out.yaml").exists()
    return path, err


@pytest.mark.parametrize("construct, reason", UNFOLLOWED, ids=[c for c, _ in UNFOLLOWED])
def test_what_convert_cannot_follow_is_refused_naming_line_and_construct(tmp_path, construct, reason):
    path, err = refused(tmp_path, f"REGION=us-central1\n{construct}\n{SUBMIT_REGION}\n")
    assert err == (
        f"{path}: --region: $REGION is {reason}, known only when the script runs (line 3); "
        "allowed: run_job.py convert FILE --var REGION=VALUE (what the script ran with), "
        "or literal values in the script\n"
    )


@pytest.mark.parametrize(
    "construct",
    [
        "unset UNUSED",
        "read OTHER",
        '[ -n "$EU" ] && OTHER=1',
        "export -n REGION",
        "(( N > 1 ))",
        "set -- europe-west4",
        ". ./vars.sh\nREGION=us-central1",  # assigned again after the file
        "cat <<EOF\nREGION=europe-west4\nEOF",
    ],
)
def test_what_leaves_the_value_alone_converts(tmp_path, construct):
    rc, _, err = convert(
        _write(tmp_path / "submit.sh", f"REGION=us-central1\n{construct}\n{SUBMIT_REGION}\n")
    )
    assert rc == 0, err


def test_a_sourced_file_refuses_only_what_the_caller_does_not_give(tmp_path):
    # The file may set REGION over the script's own value: only the caller knows what it held.
    text = f"REGION=us-central1\n. ./vars.sh\nunset UNUSED\n{SUBMIT_REGION}\n"
    rc, _, err = convert(_write(tmp_path / "submit.sh", text))
    assert (
        rc == 2 and "$REGION is possibly set by `. ./vars.sh` (line 2)" in err and "--var REGION=VALUE" in err
    )
    rc, out, err = convert(tmp_path / "submit.sh", "--var", "REGION=europe-west4")
    assert rc == 0, err
    assert "# - region europe-west4 -> the environment's region" in out


def test_here_document_lines_are_no_submit_commands(tmp_path):
    gcloud = "gcloud ai-platform jobs submit training inside --region elsewhere\n"
    script = f"{SUBMIT_REGION}\ncat > NOTES.md <<'EOF'\n" + gcloud * 21 + "EOF\n"
    rc, _, err = convert(_write(tmp_path / "submit.sh", script), "--var", "REGION=us-central1")
    assert rc == 0, err
    # A second real one is counted, and only it: the body's 21 are data.
    rc, _, err = convert(_write(tmp_path / "submit.sh", script + SUBMIT_REGION + "\n"))
    assert rc == 2 and err.endswith(
        "submit.sh: line 25: 2 submit commands (lines 1, 25); allowed: one per script\n"
    )


def test_an_unterminated_here_document_is_one_line(tmp_path):
    path, err = refused(tmp_path, f"cat <<EOF\nnotes\n{SUBMIT_REGION}\n")
    assert err == (
        f"{path}: line 1: the here-document <<EOF is never closed: no line 'EOF' follows; "
        "allowed: a here-document ended by a line holding only its delimiter word\n"
    )


def test_hostile_files_fail_fast(tmp_path):
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    rc, _, err = convert(fifo)
    assert rc == 2 and "not a regular file (a FIFO)" in err
    rc, _, err = convert(tmp_path)
    assert rc == 2 and "not a regular file (a directory)" in err
    big = tmp_path / "big.yaml"
    big.write_text("a: " + "x" * (1 << 20) + "\n", encoding="utf-8")
    rc, _, err = convert(big)
    assert rc == 2 and "bytes" in err
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(
        "a: &a [x, x, x, x, x, x, x, x, x]\n"
        + "".join(
            f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
            for p, c in zip("abcdef", "bcdefg", strict=True)
        ),
        encoding="utf-8",
    )
    rc, _, err = convert(bomb)
    assert rc == 2 and "expands to more than" in err


@pytest.mark.training  # trains the real model twice: complete runs only, not `make test-fast`
def test_the_converted_sample_runs_its_two_trial_study_locally(tmp_path):
    """The census sample's tuning config in its smallest form (BASIC tier, 2 trials, a legacy underscore
    parameter added) converts and runs its study here with the real trainer, recorded as Vertex AI would."""
    config = (LEGACY / "hptuning_config.yaml").read_text(encoding="utf-8").split("  hyperparameters:")[1]
    config = config.replace("maxTrials: 4", "maxTrials: 2\n    maxFailedTrials: 1")
    underscore = (
        "      - {parameterName: learning_rate, type: DOUBLE, minValue: 0.001, maxValue: 0.01,"
        " scaleType: UNIT_LOG_SCALE}\n"
    )
    (tmp_path / "config.yaml").write_text(
        "trainingInput:\n  scaleTier: BASIC\n  jobDir: gs://demo-project-models/census\n  hyperparameters:"
        + config
        + underscore,
        encoding="utf-8",
    )
    # A slice of the shipped data in the local data bucket: the study is what is tested, not the model.
    local = tmp_path / "local"
    (local / "gs/demo-project-data/slice").mkdir(parents=True)
    for name, lines in (("adult.data", 2000), ("adult.test", 801)):  # adult.test: a banner line + 800 rows
        text = (REPO_ROOT / "data" / "census" / name).read_text(encoding="utf-8").splitlines(keepends=True)
        (local / "gs/demo-project-data/slice" / name).write_text("".join(text[:lines]), encoding="utf-8")
    target = tmp_path / "census_legacy.yaml"
    slice_args = ["--", f"--train-files={BUCKET}/slice/adult.data", f"--eval-files={BUCKET}/slice/adult.test"]
    rc, _, err = convert(tmp_path / "config.yaml", "-o", target, *slice_args, "--num-epochs=2")
    assert rc == 0, err
    rc, out, err = run_cli([target, "--local", "--local-root", local], outputs=OUTPUTS)
    assert rc == 0, err + out
    assert "Study succeeded: 2 succeeded, 0 failed" in out
    (found,) = local.rglob("study.json")
    base, study = found.parent, json.loads(found.read_text())
    assert base.parent == local / "gs/demo-project-models/census"  # <jobDir>/<job id>
    assert [t["state"] for t in study["trials"]] == ["SUCCEEDED", "SUCCEEDED"], out
    for trial in study["trials"]:
        # The legacy ranges reached the trainer as Vertex AI writes them (the underscore flag included).
        assert 50 <= trial["parameters"]["first-layer-size"] <= 500
        assert 0.001 <= trial["parameters"]["learning_rate"] <= 0.01
        assert len(trial["measurements"]) == 2  # one per epoch, as the trainer reports them
        # The study's metric is what the trainer measured on the eval slice in its last epoch.
        run = json.loads((base / trial["id"] / "model" / "metrics.json").read_text())
        assert trial["metric"] == pytest.approx(run["history"][-1]["val_accuracy"], abs=1e-6)
        assert run["data"]["eval"]["rows"] == 800 and run["data"]["train"]["rows"] == 2000
        assert list((base / trial["id"] / "logs").rglob("*tfevents*")), (
            "TensorBoard logs: <base>/<trial>/logs"
        )
    best = study["best"]
    assert (base / best["id"] / "model" / "saved_model.pb").exists()
    assert f"SavedModel: {best['model_dir']}" in out


def _header(text: str) -> str:
    """The comment block at the top of a converted file, as one line of text."""
    lines = []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("# ").strip())
    return " ".join(lines)


def test_the_rest_of_the_job_carries_over(tmp_path):
    rc, definition, out, err = convert_text(
        tmp_path,
        """
        trainingInput:
          scaleTier: BASIC
          network: projects/123456789012/global/networks/vpc
          enableWebAccess: true
          encryptionConfig: {kmsKeyName: k}
          scheduling: {maxRunningTime: 3600s, maxWaitTime: 600s}
          args: [--train-files=gs://old-ml/census/adult.data, --eval-files=gs://old-ml/census/adult.test]
          serviceAccount: vertex-runtime@demo-project.iam.gserviceaccount.com
        """,
        "--map-bucket",
        "gs://old-ml=data_bucket",
        "--",
        "--num-epochs=2",
    )
    assert rc == 2 and "encryptionConfig.kmsKeyName: 'k' is not a full key name (line 6)" in err
    key = "projects/demo-project/locations/us-central1/keyRings/ring/cryptoKeys/k"
    text = (tmp_path / "config.yaml").read_text().replace("kmsKeyName: k}", f"kmsKeyName: {key}}}")
    (tmp_path / "config.yaml").write_text(text)
    rc, out, err = convert(
        tmp_path / "config.yaml", "--map-bucket", "gs://old-ml=data_bucket", "--", "--num-epochs=2"
    )
    assert rc == 0, err
    definition = yaml.safe_load(out)
    spec = definition["jobSpec"]
    assert spec["scheduling"] == {"timeout": "3600s", "maxWaitDuration": "600s"}
    assert spec["network"] == "projects/123456789012/global/networks/vpc" and spec["enableWebAccess"] is True
    assert spec["serviceAccount"] == "${infra.runtime_service_account}"
    assert definition["encryptionSpec"] == {"kmsKeyName": key}
    assert pools(definition)[0]["containerSpec"]["args"] == [
        "--model=wide_deep",
        "--train-files=${infra.data_bucket}/census/adult.data",
        "--eval-files=${infra.data_bucket}/census/adult.test",
        "--num-epochs=2",
    ]
    assert "copy its objects into gs://demo-project-data first" in _header(out)


def test_a_script_finds_its_config_beside_it(tmp_path):
    folder = tmp_path / "legacy"
    folder.mkdir()
    (folder / "config.yaml").write_text("trainingInput: {scaleTier: BASIC_GPU}\n", encoding="utf-8")
    (folder / "run.sh").write_text(
        'HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"\n'
        "gcloud ai-platform jobs submit training j --config=${HERE}/config.yaml -- "
        f"--train-files={DATA}/adult.data --eval-files={DATA}/adult.test\n",
        encoding="utf-8",
    )
    rc, out, err = convert(folder / "run.sh")
    assert rc == 0, err
    assert machines(yaml.safe_load(out)) == [(1, "n1-standard-4", "NVIDIA_TESLA_T4", 1)]


@pytest.mark.parametrize(
    "value", ["old-ml=data_bucket", "gs://old-ml=models", "gs://old-ml/path=data_bucket"]
)
def test_bad_bucket_maps_are_refused(tmp_path, value):
    (tmp_path / "config.yaml").write_text("scaleTier: BASIC\n", encoding="utf-8")
    rc, _, err = convert(tmp_path / "config.yaml", "--map-bucket", value, *ARGS)
    assert rc == 2 and "--map-bucket" in err and "data_bucket|models_bucket" in err
