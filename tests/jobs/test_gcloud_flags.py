"""gcloud's job-creation flags on run_job.py (jobs/definition/gcloud_flags.py): each fills in the field it
maps onto, is checked exactly like that field written in the file, is refused for the kind gcloud lacks it
for, and a flag that disagrees with the file is one line naming both. In-process run_job.py --dry-run, no
cloud."""

from __future__ import annotations

import json

import pytest

from jobs.definition.gcloud_flags import JobFlags, split_list
from tests.jobs.helpers import CUSTOM, GCLOUD_CUSTOM, OUTPUTS, TUNING, compile_text, run_cli

RUNTIME = OUTPUTS["runtime_service_account"]
KEY = "projects/demo-project/locations/us-central1/keyRings/ring/cryptoKeys/key"
# A plain `gcloud ai custom-jobs create --config` file naming no account, and one naming no args.
BARE_CUSTOM = GCLOUD_CUSTOM.replace("serviceAccount: ${infra.runtime_service_account}\n", "")
NO_ARGS = GCLOUD_CUSTOM.replace(
    "      args: [--train-files=gs://demo-data/a.csv, --eval-files=gs://demo-data/b.csv]\n", ""
)
# A plain `gcloud ai hp-tuning-jobs create --config` file: no header, no trial counts.
BARE_TUNING = "\n".join(
    line
    for line in TUNING.splitlines()
    if not line.startswith(("kind:", "trainer:", "maxTrialCount", "parallelTrialCount"))
)
DATA = "--train-files=gs://demo-data/a.csv,--eval-files=gs://demo-data/b.csv"


def dry_run(write_job, text: str, *flags: str) -> tuple[int, dict | None, str, str]:
    path = write_job(text)
    rc, out, err = run_cli([path, "--dry-run", *flags])
    request = json.loads(out) if rc == 0 else None
    return rc, request, err, str(path)


def field(request: dict, path: str):
    node = next(v for k, v in request.items() if k != "parent")  # customJob / hyperparameterTuningJob
    for key in path.split("."):
        node = node[int(key)] if isinstance(node, list) else node[key]
    return node


@pytest.mark.parametrize(
    "text, flags, path, value",
    [
        (BARE_CUSTOM, ["--service-account", RUNTIME], "jobSpec.serviceAccount", RUNTIME),
        (BARE_TUNING, ["--service-account", RUNTIME], "trialJobSpec.serviceAccount", RUNTIME),
        (GCLOUD_CUSTOM, ["--service-account", RUNTIME], "jobSpec.serviceAccount", RUNTIME),  # agrees: fine
        (
            GCLOUD_CUSTOM,
            ["--network", "projects/123/global/networks/vpc"],
            "jobSpec.network",
            "projects/123/global/networks/vpc",
        ),
        (GCLOUD_CUSTOM, ["--enable-web-access"], "jobSpec.enableWebAccess", True),
        (GCLOUD_CUSTOM, ["--enable-dashboard-access"], "jobSpec.enableDashboardAccess", True),
        (GCLOUD_CUSTOM, ["--persistent-resource-id", "pool-1"], "jobSpec.persistentResourceId", "pool-1"),
        (GCLOUD_CUSTOM, ["--kms-key", KEY], "encryptionSpec.kmsKeyName", KEY),
        (
            GCLOUD_CUSTOM,
            ["--kms-key", "key", "--kms-keyring", "ring", "--kms-location", "us-central1"],
            "encryptionSpec.kmsKeyName",
            KEY,
        ),  # an id completed in the job's project
        (
            GCLOUD_CUSTOM,
            ["--labels", "team=ml,run=a", "--labels", "empty="],
            "labels",
            {"team": "ml", "run": "a", "empty": ""},
        ),
        (CUSTOM, ["--labels", "app=census,team=ml"], "labels", {"app": "census", "team": "ml"}),
        (NO_ARGS, [f"--args={DATA}"], "jobSpec.workerPoolSpecs.0.containerSpec.args", DATA.split(",")),
        (
            NO_ARGS,
            ["--args=^;^--train-files=gs://demo-data/a.csv;--eval-files=gs://demo-data/b.csv"],
            "jobSpec.workerPoolSpecs.0.containerSpec.args",
            DATA.split(","),
        ),
        (
            GCLOUD_CUSTOM,
            ["--command", "python3,-m,trainer.task"],
            "jobSpec.workerPoolSpecs.0.containerSpec.command",
            ["python3", "-m", "trainer.task"],
        ),
        (
            GCLOUD_CUSTOM,
            ["--display-name", "nightly ${job.id}"],
            "displayName",
            "nightly ${job.id}",
        ),  # literal
        (BARE_TUNING, ["--algorithm", "random-search"], "studySpec.algorithm", "RANDOM_SEARCH"),
        (
            BARE_TUNING,
            ["--algorithm", "ALGORITHM_UNSPECIFIED"],
            "studySpec.algorithm",
            "ALGORITHM_UNSPECIFIED",
        ),
        (BARE_TUNING, ["--max-trial-count", "6", "--parallel-trial-count", "3"], "parallelTrialCount", 3),
        (TUNING, ["--max-trial-count", "4"], "maxTrialCount", 4),  # what the file says: no conflict
    ],
    ids=[
        "service-account",
        "service-account-tuning",
        "service-account-same-as-file",
        "network",
        "web-access",
        "dashboard-access",
        "persistent-resource",
        "kms-key",
        "kms-key-id",
        "labels",
        "labels-headered",
        "args",
        "args-delimiter",
        "command",
        "display-name-literal",
        "algorithm-gcloud",
        "algorithm-enum",
        "trial-counts",
        "trial-count-same-as-file",
    ],
)
def test_a_flag_fills_in_its_field(write_job, text, flags, path, value):
    rc, request, err, _ = dry_run(write_job, text, *flags)
    assert rc == 0, err
    got = field(request, path)
    if path == "labels":
        assert got == {**value, "submission_hash": got["submission_hash"]}
    else:
        assert got == value


@pytest.mark.parametrize(
    "text, flags, where, words",
    [
        (
            BARE_CUSTOM,
            ["--service-account", "intruder@demo-project.iam.gserviceaccount.com"],
            "--service-account (serviceAccount)",
            "is not an account this environment runs jobs as",
        ),
        (
            BARE_CUSTOM,
            ["--service-account", "not-an-email"],
            "--service-account (serviceAccount)",
            "is not a service account email",
        ),
        (BARE_CUSTOM, [], "serviceAccount", "or as --service-account EMAIL"),
        (
            GCLOUD_CUSTOM,
            ["--service-account", "other@demo-project.iam.gserviceaccount.com"],
            "--service-account",
            f"conflicts with serviceAccount (line 7) in the file: {RUNTIME!r} there",
        ),
        (
            CUSTOM,
            ["--service-account", "other@demo-project.iam.gserviceaccount.com"],
            "--service-account",
            "conflicts with jobSpec.serviceAccount (line 14) in the file",
        ),
        (CUSTOM, ["--labels", "app=other"], "--labels", "conflicts with labels.app (line 3) in the file"),
        (CUSTOM, ["--labels", "Team=ml"], "--labels (labels.Team)", "invalid label key"),
        (CUSTOM, ["--labels", "team=ML"], "--labels (labels.team)", "invalid label value 'ML'"),
        (CUSTOM, ["--labels", "team"], "--labels", "'team' is not KEY=VALUE"),
        (CUSTOM, ["--labels", "a=1", "--labels", "a=2"], "--labels", "label 'a' given twice"),
        (CUSTOM, ["--max-trial-count", "3"], "--max-trial-count", "a CustomJob has no such field"),
        (CUSTOM, ["--algorithm", "grid-search"], "--algorithm", "a CustomJob has no such field"),
        (
            TUNING,
            ["--persistent-resource-id", "p"],
            "--persistent-resource-id",
            "a HyperparameterTuningJob has no such field",
        ),
        (TUNING, ["--max-trial-count", "0"], "--max-trial-count", "0"),
        (
            TUNING,
            ["--max-trial-count", "9"],
            "--max-trial-count",
            "conflicts with maxTrialCount (line 3) in the file: 4 there, 9 here",
        ),
        (BARE_TUNING, ["--algorithm", "bayesian"], "--algorithm (studySpec.algorithm)", "BAYESIAN"),
        (
            GCLOUD_CUSTOM,
            ["--network", "projects/demo-project/global/networks/vpc"],
            "--network (network)",
            "is not a VPC network name",
        ),
        (GCLOUD_CUSTOM, ["--kms-key", "key"], "--kms-key", "'key' is a key id, and --kms-keyring and"),
        (GCLOUD_CUSTOM, ["--kms-location", "us-central1"], "--kms-location", "no --kms-key is given"),
        (
            GCLOUD_CUSTOM,
            ["--kms-key", KEY.replace("us-central1", "europe-west4")],
            "--kms-key (encryptionSpec.kmsKeyName)",
            "the key is in europe-west4, the job in us-central1",
        ),
        (CUSTOM, ["--command", "sh"], "--command", "no worker pool runs a container"),
        (
            GCLOUD_CUSTOM,
            ["--args=--num-epochs=2"],
            "--args",
            "conflicts with workerPoolSpecs.0.containerSpec.args (line 6) in the file",
        ),
        (
            NO_ARGS,
            [f"--args={DATA},--bogus=1"],
            "--args (workerPoolSpecs.0.containerSpec.args",
            "--bogus",
        ),  # the trainer's own parser runs on flag args as on the file's
        (
            TUNING.replace("maxTrialCount: 4\n", "maxTrialCount: 4\ndisplayName: mine\n"),
            ["--display-name", "theirs"],
            "--display-name",
            "conflicts with displayName (line 4)",
        ),
        (
            GCLOUD_CUSTOM,
            ["--display-name", "bell\a"],
            "--display-name (displayName)",
            "contains the control character U+0007",
        ),
    ],
    ids=[
        "account-not-listed",
        "account-not-email",
        "account-missing-names-the-flag",
        "account-conflict-gcloud",
        "account-conflict-headered",
        "label-conflict",
        "label-key",
        "label-value",
        "label-syntax",
        "label-twice",
        "trials-for-custom-job",
        "algorithm-for-custom-job",
        "persistent-resource-for-study",
        "trial-count-zero",
        "trial-count-conflict",
        "algorithm-unknown",
        "network-not-a-number",
        "kms-id-alone",
        "kms-part-alone",
        "kms-other-region",
        "command-without-container",
        "args-conflict",
        "args-checked-by-trainer",
        "display-name-conflict",
        "display-name-control",
    ],
)
def test_bad_flag_values_are_one_line_naming_the_flag(write_job, text, flags, where, words):
    rc, request, err, path = dry_run(write_job, text, *flags)
    assert rc == 2 and request is None and err.count("\n") == 1, err
    assert err.startswith(f"{path}: {where}") and words in err and "; allowed: " in err, err


def test_flags_enter_the_submission_hash():
    def digest(**flags):
        return compile_text(GCLOUD_CUSTOM, flags=JobFlags(**flags)).submission_hash

    base = digest()
    assert digest(labels=(("team", "ml"),)) != base
    assert digest(network="projects/1/global/networks/a") != digest(network="projects/1/global/networks/b")
    assert digest(enable_web_access=True) != base
    assert digest(labels=(("team", "ml"),)) == digest(labels=(("team", "ml"),))  # same flags, same hash


def test_only_what_a_flag_added_is_addressed_to_the_flag():
    # A flag that repeats the file's value adds nothing: later errors about that field point at the file.
    assert compile_text(GCLOUD_CUSTOM, flags=JobFlags(service_account=RUNTIME)).flagged == {}
    job = compile_text(BARE_CUSTOM, flags=JobFlags(service_account=RUNTIME, labels=(("team", "ml"),)))
    assert job.flagged == {"jobSpec.serviceAccount": "--service-account", "labels.team": "--labels"}
    assert job.error("jobSpec.serviceAccount", "p").path == "--service-account (serviceAccount)"


@pytest.mark.parametrize(
    "text, items",
    [("a,b", ["a", "b"]), ("^:^a,b:c", ["a,b", "c"]), ("", []), ("one", ["one"])],
)
def test_list_values_split_as_gcloud_splits_them(text, items):
    assert split_list(text) == items
