#!/usr/bin/env python3
"""Validate, build, submit and follow a Vertex AI training or tuning job defined in jobs/*.yaml.

Examples (from the repo root; python is .venv/bin/python, or python after `. .venv/bin/activate`):
  python scripts/run_job.py jobs/census_cpu.yaml --dry-run         # print the exact request; no cloud, no TF
  python scripts/run_job.py jobs/census_tuning.yaml --local        # run the study on this machine
  python scripts/run_job.py jobs/census_cpu.yaml --env dev         # build image if missing, submit, follow
  python scripts/run_job.py jobs/census_tuning.yaml --set maxTrialCount=20 --set parallelTrialCount=4
  python scripts/run_job.py jobs/census_cpu.yaml --no-wait         # submit and return
  python scripts/run_job.py --follow projects/P/locations/R/customJobs/ID   # state and log lines
  python scripts/run_job.py jobs/recommender.yaml --follow projects/P/locations/R/customJobs/ID  # + register
  python scripts/run_job.py gcloud_config.yaml --service-account EMAIL --labels team=ml   # gcloud's flags
  python scripts/run_job.py report projects/P/locations/R/hyperparameterTuningJobs/ID   # a study's report
  python scripts/run_job.py convert legacy/train.sh -o jobs/census_legacy.yaml   # legacy AI Platform job
  python scripts/run_job.py serve .local/gs/BUCKET/census-cpu/JOB_ID/model       # serve an export here
  python scripts/run_job.py deploy recommender@production --endpoint recommender --traffic 10  # canary

A definition is the Vertex AI REST resource (camelCase, as `gcloud ai custom-jobs create --config` takes it)
with a thin header (`kind`, `trainer.delivery`) and references: ${infra.<output>} from the environment's infra
outputs (deployed .infra-outputs/<env>.json, else planned from infra/environments/<env>.yaml) and ${job.id},
${job.image_tag} (the trainer image's content hash), ${job.package_uri}, ... filled in per submission. A job
on the trainer image (${infra.trainer_image}:<cpu|gpu|tpu>-${job.image_tag}) gets it built by Cloud Build
when Artifact Registry lacks the tag; a job on a prebuilt image gets the trainer sdist uploaded by its hash.
Plain gcloud config files work too, and so do the flags of `gcloud ai custom-jobs|hp-tuning-jobs create` that
set fields of a definition (--service-account, --labels, --network, --kms-key, --args, --algorithm, ...): in
either form of definition a flag sets its field, is checked like that field in the file, and overrides the
file's value as gcloud does (--args/--command replace every pool's), each override one line on stderr.

Submitting is idempotent: each submission is labelled submission_hash=<hash of definition, code, overrides>
and a live job with the same label is followed instead of creating a duplicate. Bad input prints one line
(file: field: problem; allowed: ...) and exits 2 before anything is uploaded or submitted. A job that ends in
any state but SUCCEEDED exits 1 with its error; Ctrl-C while following exits 130 and leaves the job running.
Output that cannot be written (stdout on a full disk, a pipe whose reader exited) is one line and exit 1.
Following prints the job's log entries from Cloud Logging as they arrive, each line prefixed with its replica
(and trial) and severity; a failed read (quota, server error) is retried with backoff and resumes where it
left off; --no-logs follows the state alone. A tuning job followed to its end (in any state)
gets the report --local writes for its studies: a table of every trial, the best trial, parameter importance,
study.json and study.png, in .local/reports/<job id>/ (--report-dir DIR moves it).

A definition with a `registry:` block registers the model of a job that succeeded (a study: its best trial's)
as a new version in the Vertex AI Model Registry, and moves its aliases only past the evaluation gate (see
jobs/README.md, "Model Registry"). `JOB_FILE --follow RESOURCE_NAME` (same flags as the submit) registers a
job submitted with --no-wait, or finishes a registration that failed; a retry never uploads a second version.

Verbs, given first: `convert` turns a legacy AI Platform Training config or submit script into a definition;
`report RESOURCE_NAME` writes the report of any earlier job (a study's, or a CustomJob's state, times, model
folder and metrics); `serve MODEL_DIR` serves an exported SavedModel on http://127.0.0.1:8080 exactly as its
Model Registry entry serves it on Vertex AI (`python -m serving` with the AIP_* variables); `deploy
MODEL@ALIAS --endpoint NAME` serves a registered version from one of the environment's endpoints (a canary
with --traffic N, never twice, then a smoke prediction), `rollback --endpoint NAME` undoes the last deploy's
traffic change and `undeploy` takes a version off. A definition's `deploy:` block deploys after registering.
See `run_job.py <verb> --help` and jobs/README.md. A job file named like a verb is given as a path:
`run_job.py ./report`.
"""

import sys
from pathlib import Path

# Run as a script: make the repo root importable (jobs/, infra/, trainer/).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from jobs.cli.common import guard_stdout  # noqa: E402 - after the path setup above
from jobs.cli.run_job import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(guard_stdout(lambda: main(description=__doc__), "run_job.py"))
