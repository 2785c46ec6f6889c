"""gcloud's job-creation flags on run_job.py (jobs/definition/gcloud_flags.py): each fills in the field it
maps onto, is checked exactly like that field written in the file, is refused for the kind gcloud lacks it
for, and overrides the file's value as gcloud does, saying so in one line on stderr. In-process run_job.py
--dry-run, no cloud."""

from __future__ import annotations

import json

import pytest

from jobs.definition.gcloud_flags import JobFlags, split_list
from tests.jobs.helpers import CUSTOM, GCLOUD_CUSTOM, JOBS_DIR, OUTPUTS, TUNING, compile_text, run_cli

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
    assert " overrides " not in err  # it filled in, or repeated the file's value: nothing to report
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
            NO_ARGS,
            [f"--args={DATA},--bogus=1"],
            "--args (workerPoolSpecs.0.containerSpec.args",
            "--bogus",
        ),  # the trainer's own parser runs on flag args as on the file's
        (
            GCLOUD_CUSTOM,
            ["--args=--num-epochs=2"],
            "--args (workerPoolSpecs.0.containerSpec.args",
            "the following arguments are required",
        ),  # an overriding value is checked like the file's: the trainer needs its data
        (
            CUSTOM.replace("labels: {app: census}", "labels: census"),
            ["--labels", "team=ml"],
            "--labels",
            "sets a field inside labels (line 3), which the file gives the single value 'census'",
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
        "label-key",
        "label-value",
        "label-syntax",
        "label-twice",
        "trials-for-custom-job",
        "algorithm-for-custom-job",
        "persistent-resource-for-study",
        "trial-count-zero",
        "algorithm-unknown",
        "network-not-a-number",
        "kms-id-alone",
        "kms-part-alone",
        "kms-other-region",
        "command-without-container",
        "args-checked-by-trainer",
        "args-override-checked-by-trainer",
        "labels-not-a-mapping",
        "display-name-control",
    ],
)
def test_bad_flag_values_are_one_line_naming_the_flag(write_job, text, flags, where, words):
    rc, request, err, path = dry_run(write_job, text, *flags)
    assert rc == 2 and request is None and err.count("\n") == 1, err
    assert err.startswith(f"{path}: {where}") and words in err and "; allowed: " in err, err


OTHER = "other@demo-project.iam.gserviceaccount.com"


@pytest.mark.parametrize(
    "text, flags, path, value, note",
    [
        (
            GCLOUD_CUSTOM.replace("${infra.runtime_service_account}", OTHER),
            ["--service-account", RUNTIME],
            "jobSpec.serviceAccount",
            RUNTIME,
            f"--service-account overrides serviceAccount (line 7): {OTHER!r} in the file, "
            f"{RUNTIME!r} from the flag",
        ),
        (
            CUSTOM,
            ["--labels", "app=other,team=ml"],
            "labels.app",
            "other",
            "--labels overrides labels.app (line 3): 'census' in the file, 'other' from the flag",
        ),  # key by key: the file's other labels stay, team is filled in without a line
        (
            TUNING,
            ["--max-trial-count", "9"],
            "maxTrialCount",
            9,
            "--max-trial-count overrides maxTrialCount (line 3): 4 in the file, 9 from the flag",
        ),
        (
            TUNING.replace("maxTrialCount: 4\n", "maxTrialCount: 4\ndisplayName: mine\n"),
            ["--display-name", "theirs"],
            "displayName",
            "theirs",
            "--display-name overrides displayName (line 4): 'mine' in the file, 'theirs' from the flag",
        ),
        (
            GCLOUD_CUSTOM,
            ["--args=--train-files=gs://demo-data/a.csv,--eval-files=gs://demo-data/c.csv,--num-epochs=2"],
            "jobSpec.workerPoolSpecs.0.containerSpec.args",
            ["--train-files=gs://demo-data/a.csv", "--eval-files=gs://demo-data/c.csv", "--num-epochs=2"],
            "--args overrides workerPoolSpecs.0.containerSpec.args (line 6): "
            "[..., '--eval-files=gs://demo-data/b.csv'] in the file, "
            "[..., '--eval-files=gs://demo-data/c.csv', '--num-epochs=2'] from the flag",
        ),  # the args are replaced whole, as gcloud does; the line shows where they differ
    ],
    ids=["service-account", "label", "trial-count", "display-name", "args"],
)
def test_a_flag_overrides_the_files_value_in_one_line_on_stderr(write_job, text, flags, path, value, note):
    rc, request, err, file = dry_run(write_job, text, *flags)  # stdout parses as the request alone
    assert rc == 0, err
    assert field(request, path) == value
    assert [line for line in err.splitlines() if " overrides " in line] == [f"{file}: {note}"]
    if path == "labels.app":
        assert field(request, "labels.team") == "ml"


def test_args_and_command_replace_every_pools():
    # census_multiworker.yaml: a chief and two workers sharing one args list through a YAML anchor.
    path = JOBS_DIR / "census_multiworker.yaml"
    args = [
        "--model=wide_deep",
        "--train-files=gs://demo-project-data/census/adult.data",
        "--eval-files=gs://demo-project-data/census/adult.test",
        "--num-epochs=2",
        "--distribution=multi_worker",
    ]
    command = ["python3", "-m", "trainer.task"]
    rc, out, err = run_cli([path, "--dry-run", "--args=" + ",".join(args), "--command", ",".join(command)])
    assert rc == 0, err
    pools = field(json.loads(out), "jobSpec.workerPoolSpecs")
    assert len(pools) == 2
    assert all(p["containerSpec"]["args"] == args and p["containerSpec"]["command"] == command for p in pools)
    notes = [line for line in err.splitlines() if " overrides " in line]
    assert [n.split(": ", 2)[1] for n in notes] == [
        f"--args overrides jobSpec.workerPoolSpecs.{i}.containerSpec.args (line 21)" for i in (0, 1)
    ]  # the file has no command: filled in, no line
    assert all("'--num-epochs=8', '--train-batch-size=256'" in n and "'--num-epochs=2'" in n for n in notes)


def test_the_request_hash_covers_what_the_flags_made():
    # The same request whether the file says it or a flag overrides the file: same body, same submission.
    epochs = GCLOUD_CUSTOM.replace("b.csv]", "b.csv, --num-epochs=2]")
    flags = JobFlags(
        args=("--train-files=gs://demo-data/a.csv", "--eval-files=gs://demo-data/b.csv", "--num-epochs=2")
    )
    by_flag, in_file = compile_text(GCLOUD_CUSTOM, flags=flags), compile_text(epochs)
    assert by_flag.request() == in_file.request()
    assert by_flag.submission_hash == in_file.submission_hash != compile_text(GCLOUD_CUSTOM).submission_hash


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
