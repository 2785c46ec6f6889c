"""The Model Registry block and the pure rules of registering (model_registry.py), table by table: the
block's validation (through compile + validate, and through run_job.py for the one-line refusal), the upload
request against the real UploadModelRequest, label encoding, metrics.json readings, the best trial and the
evaluation gate."""

from __future__ import annotations

import json
import re

import pytest

from common.model_registry import JOB_LABEL, TRIAL_LABEL, metric_label_key, metric_label_value
from jobs.definition.errors import JobError
from jobs.definition.model_registry import (
    Reading,
    best_trial,
    gate,
    read_metric,
    upload_request,
    version_labels,
)
from tests.jobs.helpers import (
    CUSTOM,
    DELETE,
    GCLOUD_CUSTOM,
    IMAGE_HASH,
    JOBS_DIR,
    OUTPUTS,
    TUNING,
    check,
    run_cli,
)

AUC = {"metricId": "auc", "goal": "MAXIMIZE"}
BLOCK = {"model": "census", "aliases": ["production"], "metric": AUC}
PARENT = "projects/demo-project/locations/us-central1"
SERVING = {
    "imageUri": f"{OUTPUTS['trainer_image']}:cpu-{IMAGE_HASH}",
    "command": ["python", "-m", "serving"],
    "ports": [{"containerPort": 8080}],
    "predictRoute": "/predict",
    "healthRoute": "/health",
}


def block(**changes) -> dict:
    return {"registry": {**BLOCK, **changes}}


def test_a_block_compiles_into_the_spec_the_plan_and_the_schedule_read():
    spec = check(CUSTOM, block(labels={"team": "ml", "tier": 1})).registry
    assert (spec.model_id, spec.display_name, spec.aliases) == ("census", "census", ("production",))
    assert (spec.metric, spec.goal, spec.labels) == ("auc", "MAXIMIZE", {"team": "ml", "tier": "1"})
    # The trainer image's cpu variant of this checkout, whatever image the job itself runs (here the sdist).
    assert spec.container_spec == SERVING
    assert spec.model_name(PARENT) == f"{PARENT}/models/census"


def test_a_study_registers_by_its_own_metric():
    assert (check(TUNING, {"registry": {"model": "census"}}).registry.metric) == "accuracy"
    given = {"model": "census", "metric": {"metricId": "accuracy", "goal": "MAXIMIZE"}}
    assert check(TUNING, {"registry": given}).registry.goal == "MAXIMIZE"


def test_the_block_is_part_of_the_submission():
    plain = check(CUSTOM)
    registered = check(CUSTOM, block())
    moved = check(CUSTOM, block(aliases=["staging"]))
    assert len({plain.submission_hash, registered.submission_hash, moved.submission_hash}) == 3
    assert plain.registry is None and "registry" not in registered.body  # never sent with the job


INVALID = [
    ("not-a-mapping", CUSTOM, {"registry": "census"}, "registry", "must be a mapping"),
    ("unknown-field", CUSTOM, block(alias=["production"]), "registry.alias", "unknown field 'alias'"),
    ("no-model", CUSTOM, {"registry": {"metric": AUC}}, "registry.model", "missing"),
    ("uppercase-model", CUSTOM, block(model="Census"), "registry.model", "invalid model id 'Census'"),
    ("model-starts-with-digit", CUSTOM, block(model="1census"), "registry.model", "invalid model id"),
    ("model-too-long", CUSTOM, block(model="m" * 64), "registry.model", "invalid model id"),
    ("aliases-not-a-list", CUSTOM, block(aliases="production"), "registry.aliases", "must be a list"),
    ("uppercase-alias", CUSTOM, block(aliases=["Production"]), "registry.aliases.0", "not a version alias"),
    (
        "version-number-alias",
        CUSTOM,
        block(aliases=["prod", "2"]),
        "registry.aliases.1",
        "not a version alias",
    ),
    ("alias-ends-with-hyphen", CUSTOM, block(aliases=["prod-"]), "registry.aliases.0", "not a version alias"),
    ("one-letter-alias", CUSTOM, block(aliases=["p"]), "registry.aliases.0", "not a version alias"),
    (
        "default-alias",
        CUSTOM,
        block(aliases=["default"]),
        "registry.aliases.0",
        "keeps on exactly one version",
    ),
    ("too-many-aliases", CUSTOM, block(aliases=[f"a{i}" for i in range(11)]), "registry.aliases", "most 10"),
    # A hostile block fails on its count, before any alias is looked at (it once made a 68 KB plan line).
    ("ten-thousand-aliases", CUSTOM, block(aliases=["p"] * 10_000), "registry.aliases", "10000 aliases"),
    ("alias-twice", CUSTOM, block(aliases=["prod", "prod"]), "registry.aliases.1", "listed twice"),
    ("label-key", CUSTOM, block(labels={"Team": "ml"}), "registry.labels.Team", "invalid label key"),
    ("label-value", CUSTOM, block(labels={"team": "ML"}), "registry.labels.team", "invalid label value"),
    ("label-bool", CUSTOM, block(labels={"team": True}), "registry.labels.team", "invalid label value"),
    (
        "job-label",
        CUSTOM,
        block(labels={JOB_LABEL: "1"}),
        f"registry.labels.{JOB_LABEL}",
        "set on every version",
    ),
    ("metric-label", CUSTOM, block(labels={"auc": "1"}), "registry.labels.auc", "set on every version"),
    (
        "too-many-labels",
        CUSTOM,
        block(labels={f"k{i}": "v" for i in range(62)}),
        "registry.labels",
        "at most 61",
    ),
    ("custom-job-no-metric", CUSTOM, {"registry": {"model": "census"}}, "registry.metric", "missing"),
    ("metric-extra", CUSTOM, block(metric={**AUC, "x": 1}), "registry.metric", "metricId and goal"),
    ("metric-goal", CUSTOM, block(metric={"metricId": "auc", "goal": "UP"}), "registry.metric.goal", "'UP'"),
    (
        "metric-not-written",
        CUSTOM,
        block(metric={"metricId": "recall_at_k", "goal": "MAXIMIZE"}),
        "registry.metric.metricId",
        "--model wide_deep writes no 'recall_at_k' to metrics.json",
    ),
    (
        "metric-wrong-way",
        CUSTOM,
        block(metric={"metricId": "auc", "goal": "MINIMIZE"}),
        "registry.metric.goal",
        "the gate would keep the worse version",
    ),
    (
        "study-other-metric",
        TUNING,
        block(metric=AUC),
        "registry.metric.metricId",
        "differs from the study's accuracy MAXIMIZE",
    ),
    (
        "study-other-goal",
        TUNING,
        block(metric={"metricId": "accuracy", "goal": "MINIMIZE"}),
        "registry.metric.goal",
        "differs from the study's",
    ),
    (
        "prebuilt-tf-prediction",
        CUSTOM,
        block(serving="us-docker.pkg.dev/vertex-ai/prediction/tf2-cpu.2-15:latest"),
        "registry.serving",
        "prebuilt TensorFlow 2.15 prediction image (the line ends at 2.15 and is no longer updated) serves "
        "serving_default only",
    ),
    (
        "prebuilt-sklearn",
        CUSTOM,
        block(serving="europe-docker.pkg.dev/vertex-ai/prediction/sklearn-cpu.1-3:latest"),
        "registry.serving",
        "a prebuilt sklearn prediction image cannot load a TensorFlow SavedModel",
    ),
    (
        "custom-image",
        CUSTOM,
        block(serving="us-central1-docker.pkg.dev/demo-project/ml/server:1"),
        "registry.serving",
        "another image is not accepted",
    ),
    ("serving-spec", CUSTOM, block(serving={"imageUri": "x"}), "registry.serving", "not accepted"),
    (
        "no-output-directory",
        CUSTOM,
        {**block(), "jobSpec.baseOutputDirectory": DELETE, "jobSpec.tensorboard": DELETE},
        "jobSpec.baseOutputDirectory.outputUriPrefix",
        "registers the model Vertex AI writes under it",
    ),
    ("gcloud-file", GCLOUD_CUSTOM, block(), "registry", "belongs to the headered form"),
]


@pytest.mark.parametrize(
    "base, mutations, path, words", [r[1:] for r in INVALID], ids=[r[0] for r in INVALID]
)
def test_a_bad_block_is_one_error_naming_its_field(base, mutations, path, words):
    with pytest.raises(JobError) as caught:
        check(base, mutations)
    assert caught.value.path == path, str(caught.value)
    assert words in str(caught.value) and "; allowed: " in str(caught.value)
    assert "\n" not in str(caught.value)


def _with_registry(text: str, registry: str) -> str:
    return text.replace("labels: {app: census}\n", "labels: {app: census}\n" + registry, 1)


CLI_REFUSALS = [
    ("registry:\n  model: census\n  metric: {metricId: auc, goal: MAXIMIZE}\n  alias: [production]\n",
     "registry.alias", 7, "unknown field 'alias' (line 7); allowed: model, aliases, labels, metric, serving"),
    ("registry:\n  model: census\n  aliases: [Production]\n  metric: {metricId: auc, goal: MAXIMIZE}\n",
     "registry.aliases.0", 6, "'Production' is not a version alias"),
    ("registry:\n  model: census\n  metric: {metricId: auc, goal: MAXIMIZE}\n"
     "  serving: us-docker.pkg.dev/vertex-ai/prediction/tf2-cpu.2-15:latest\n",
     "registry.serving", 7, "allowed: trainer (the trainer image's cpu variant"),
    # 10,000 aliases: refused by their count, in a short line (once accepted: a 68 KB plan line).
    ("registry:\n  model: census\n  aliases: [" + ", ".join(f"a{i:05}" for i in range(10_000)) + "]\n"
     "  metric: {metricId: auc, goal: MAXIMIZE}\n", "registry.aliases", 6, "10000 aliases"),
]  # fmt: skip


@pytest.mark.parametrize(
    "registry, path, line, words", CLI_REFUSALS, ids=["unknown", "alias", "serving", "ten-thousand-aliases"]
)
def test_run_job_refuses_a_bad_block_in_one_line_before_any_cloud_call(
    write_job, registry, path, line, words
):
    job = write_job(_with_registry(CUSTOM, registry))
    calls = []

    def factory(project, region):  # any client at all would be a cloud call
        calls.append((project, region))
        raise AssertionError("no client may be made for bad input")

    for args in ([], ["--dry-run"]):
        rc, out, err = run_cli([job, *args], factory=factory)
        assert (rc, out, err.count("\n")) == (2, "", 1) and len(err) < 500, err[:500]
        assert err.startswith(f"{job}: {path}: ") and f"(line {line})" in err and words in err, err
    assert calls == []


# --- the request and the labels ---------------------------------------------------------------------------


@pytest.mark.parametrize("exists", [False, True], ids=["new-model", "new-version"])
def test_the_upload_request_is_a_real_upload_model_request_without_aliases(exists):
    from google.cloud.aiplatform_v1 import UploadModelRequest

    spec = check(CUSTOM, block(labels={"team": "ml"})).registry
    labels = version_labels(spec, "1000", trial_id="3", metric_value=metric_label_value(0.9231))
    request = upload_request(
        spec, PARENT, artifact_uri="gs://b/t/run/3/model", labels=labels, description="d", model_exists=exists
    )
    message = UploadModelRequest.from_json(json.dumps(request))  # the client's own parser: field names, types
    assert (message.parent_model, message.model_id) == (
        (f"{PARENT}/models/census", "") if exists else ("", "census")
    )
    assert message.model.artifact_uri == "gs://b/t/run/3/model" and message.model.display_name == "census"
    assert list(message.model.version_aliases) == []  # only the gate gives an alias, after the upload
    assert dict(message.model.labels) == {"team": "ml", JOB_LABEL: "1000", TRIAL_LABEL: "3", "auc": "0_9231"}
    assert message.model.container_spec.image_uri == SERVING["imageUri"]
    assert message.model.container_spec.ports[0].container_port == 8080


@pytest.mark.parametrize(
    "value, label",
    [
        (0.8712, "0_8712"),
        (1.0, "1_0"),  # a double, as Workflows' string() writes it
        (1, "1"),  # an integer in metrics.json stays one
        (0.0, "0_0"),
        (-0.5, "-0_5"),
        (1e-05, "1e-05"),
        (123456789.0, "123456789_0"),
        (1e22, "1e_22"),
        (0.1 + 0.2, "0_30000000000000004"),  # the shortest round-trip form, never rounded
        (10**70, None),  # 71 digits: over a label value's 63 characters, so no label
    ],
)
def test_metric_values_become_label_values(value, label):
    from infra.config import LABEL_VALUE

    assert metric_label_value(value) == label and (label is None or LABEL_VALUE.fullmatch(label))


def test_metric_ids_become_label_keys():
    assert [metric_label_key(m) for m in ("recall_at_k", "val/Accuracy", "1x")] == [
        "recall_at_k",
        "val_accuracy",
        "m_1x",
    ]


# --- metrics.json, the best trial, the gate ---------------------------------------------------------------

URI = "gs://b/run/model/metrics.json"


@pytest.mark.parametrize(
    "data, reading",
    [
        (b'{"eval": {"auc": 0.92, "loss": 0.3}, "history": []}', Reading(0.92)),
        (b'{"eval": {"auc": 1}}', Reading(1.0)),
        (None, Reading(None, f"{URI} does not exist")),
        (b"{", Reading(None, f"{URI} is not JSON")),
        (b"\xff", Reading(None, f"{URI} is not JSON")),
        (b"[]", Reading(None, f"{URI} has no eval mapping")),
        (b'{"eval": {"loss": 0.3}}', Reading(None, f"{URI} has no eval.auc (it has loss)")),
        (b'{"eval": {"auc": NaN}}', Reading(None, f"{URI} has eval.auc = nan, not a finite number")),
        (b'{"eval": {"auc": "0.9"}}', Reading(None, f"{URI} has eval.auc = '0.9', not a finite number")),
        (b'{"eval": {"auc": true}}', Reading(None, f"{URI} has eval.auc = True, not a finite number")),
        (b" " * (4 << 20) + b"  ", Reading(None, f"{URI} is over 4 MiB")),
    ],
    ids=["value", "int", "missing", "truncated", "binary", "list", "no-key", "nan", "string", "bool", "huge"],
)
def test_a_version_metric_is_read_from_its_metrics_json(data, reading):
    assert read_metric(data, URI, "auc") == reading


def _trial(trial_id, state, value):
    return {
        "id": trial_id,
        "state": state,
        "finalMeasurement": {"metrics": [{"metricId": "auc", "value": value}]},
    }


def test_the_best_trial_is_the_best_succeeded_one_by_the_goal():
    trials = [
        _trial("1", "SUCCEEDED", 0.80),
        _trial("2", "SUCCEEDED", 0.90),
        _trial("3", "INFEASIBLE", 0.99),
        _trial("4", "SUCCEEDED", 0.90),  # a tie: the earlier trial stays best
        {"id": "5", "state": "ACTIVE"},
    ]
    assert best_trial(trials, "auc", "MAXIMIZE") == ("2", 0.90)
    assert best_trial(trials, "auc", "MINIMIZE") == ("1", 0.80)
    assert best_trial(trials, "accuracy", "MAXIMIZE") is None
    assert best_trial([_trial("1", "INFEASIBLE", 0.9)], "auc", "MAXIMIZE") is None


GATE = [
    ("MAXIMIZE", 0.91, "1", 0.90, True, "auc 0.91 is no worse than the holder's 0.9 (MAXIMIZE)"),
    ("MAXIMIZE", 0.90, "1", 0.90, True, "auc 0.9 is no worse than the holder's 0.9 (MAXIMIZE)"),
    ("MAXIMIZE", 0.89, "1", 0.90, False, "auc 0.89 is worse than the holder's 0.9 (MAXIMIZE)"),
    ("MINIMIZE", 0.29, "1", 0.30, True, "auc 0.29 is no worse than the holder's 0.3 (MINIMIZE)"),
    ("MINIMIZE", 0.30, "1", 0.30, True, "auc 0.3 is no worse than the holder's 0.3 (MINIMIZE)"),
    ("MINIMIZE", 0.31, "1", 0.30, False, "auc 0.31 is worse than the holder's 0.3 (MINIMIZE)"),
    ("MAXIMIZE", 0.50, None, None, True, "auc 0.5; no version held it"),
    ("MAXIMIZE", "no file", "1", 0.90, False, "the new version's metric is unknown: no file"),
    ("MAXIMIZE", "no file", None, None, False, "the new version's metric is unknown: no file"),
    ("MAXIMIZE", 0.95, "1", "no file", False, "the holder's metric is unknown: no file"),
    # A newer holder keeps it whatever the metrics, a tie included: a late registration takes nothing back.
    ("MAXIMIZE", 0.90, "3", 0.90, False, "version 3, newer, holds it"),
    ("MAXIMIZE", 0.99, "3", 0.10, False, "version 3, newer, holds it"),
    ("MAXIMIZE", 0.10, "2", 0.90, False, "version 2 holds it already"),
]


@pytest.mark.parametrize("goal, new, holder_id, held, move, why", GATE)
def test_the_gate_moves_an_alias_only_to_a_version_no_worse_than_an_older_holder(
    goal, new, holder_id, held, move, why
):
    def reading(value):
        return Reading(None, value) if isinstance(value, str) else Reading(value)

    reads = []
    decision = gate("auc", goal, "2", reading(new), holder_id, lambda: reads.append(held) or reading(held))
    assert (decision.move, decision.why) == (move, why)
    # The holder's metrics.json is read only when the metrics are compared.
    assert len(reads) == (holder_id == "1" and not isinstance(new, str))


def test_dry_run_of_a_study_names_the_best_trial_folder(write_job):
    study = _with_registry(TUNING.replace("maxTrialCount: 4\n", "labels: {app: census}\nmaxTrialCount: 4\n"),
                           "registry: {model: census, aliases: [production]}\n")  # fmt: skip
    rc, out, err = run_cli([write_job(study), "--dry-run"])
    assert rc == 0, err
    prefix = json.loads(out)["hyperparameterTuningJob"]["trialJobSpec"]["baseOutputDirectory"][
        "outputUriPrefix"
    ]
    upload = json.loads(re.search(r"model upload request .*?:\n(\{.*\n\})", err, re.S).group(1))
    assert upload["model"]["artifactUri"] == f"{prefix}/<best trial id>/model"
    assert upload["model"]["labels"][TRIAL_LABEL] == "<best trial id>"
    assert "register model census (its best trial's model as a new version" in err
    assert "gate alias production on accuracy MAXIMIZE" in err


@pytest.mark.parametrize(
    "text, mutations, images",
    [
        (CUSTOM, block(), [SERVING["imageUri"]]),
        (
            (JOBS_DIR / "census_gpu.yaml").read_text(),
            {"registry": {**BLOCK, "metric": {"metricId": "accuracy", "goal": "MAXIMIZE"}}},
            [SERVING["imageUri"].replace(":cpu-", ":gpu-"), SERVING["imageUri"]],
        ),
    ],
    ids=["sdist-on-prebuilt", "gpu-image"],
)
def test_the_plan_makes_sure_the_serving_image_exists_before_anything_runs(text, mutations, images):
    from jobs import api

    job = check(text, mutations)
    plan = api.plan_job(job, OUTPUTS)
    assert [b.image for b in plan.builds] == images
    steps = plan.describe()
    assert steps[0].startswith(f"1. look up {', '.join(images)} in Artifact Registry")
    (register,) = [s for s in steps if "register model census" in s]
    assert "gate alias production" in register and steps.index(register) > 0
    # Registering a job submitted earlier: only the serving image, the job picked up instead of created.
    name = f"{PARENT}/customJobs/1000"
    later = api.plan_job(job, OUTPUTS, follow=name)
    assert [b.image for b in later.builds] == [SERVING["imageUri"]]
    assert not [s for s in later.describe() if "create CustomJob" in s]
    assert f"read {name}: it must carry this submission's submission_hash={job.submission_hash}" in "".join(
        later.describe()
    )
