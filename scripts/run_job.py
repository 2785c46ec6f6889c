#!/usr/bin/env python3
"""Validate, build, submit and follow a Vertex AI training or tuning job defined in jobs/*.yaml.

Usage (from the repo root, inside the Pipenv environment):
  python scripts/run_job.py jobs/census_cpu.yaml --dry-run         # print the exact request; no cloud, no TF
  python scripts/run_job.py jobs/census_tuning.yaml --local        # run the study on this machine
  python scripts/run_job.py jobs/census_cpu.yaml --env dev         # build image if missing, submit, follow
  python scripts/run_job.py jobs/census_tuning.yaml --set maxTrialCount=20 --set parallelTrialCount=4
  python scripts/run_job.py jobs/census_cpu.yaml --no-wait         # submit and return
  python scripts/run_job.py --follow projects/P/locations/R/customJobs/ID
  python scripts/run_job.py convert legacy/train.sh -o jobs/census_legacy.yaml   # legacy AI Platform job
  python scripts/run_job.py serve .local/gs/BUCKET/census-cpu/JOB_ID/model       # serve an export here

A definition is the Vertex AI REST resource (camelCase, as `gcloud ai custom-jobs create --config` takes it)
with a thin header (`kind`, `trainer.delivery`) and references: ${infra.<output>} from the environment's infra
outputs (deployed .infra-outputs/<env>.json, else planned from infra/environments/<env>.yaml) and ${job.id},
${job.image_tag} (the trainer image's content hash), ${job.package_uri}, ... filled in per submission. A job
on the trainer image (${infra.trainer_image}:<cpu|gpu|tpu>-${job.image_tag}) gets it built by Cloud Build
when Artifact Registry lacks the tag; a job on a prebuilt image gets the trainer sdist uploaded by its hash.
Plain gcloud config files work too (--display-name, --max-trial-count, --parallel-trial-count, --region supply
what gcloud takes as flags).

Submitting is idempotent: each submission is labelled submission_hash=<hash of definition, code, overrides>
and a live job with the same label is followed instead of creating a duplicate. Bad input prints one line
(file: field: problem; allowed: ...) and exits 2 before anything is uploaded or submitted. A job that ends in
any state but SUCCEEDED exits 1 with its error; Ctrl-C while following exits 130 and leaves the job running.

`convert` turns a legacy AI Platform Training config or submit script into a definition (see
`run_job.py convert --help` and jobs/README.md). `serve MODEL_DIR` serves an exported SavedModel on
http://127.0.0.1:8080 exactly as its Model Registry entry serves it on Vertex AI (`python -m trainer.serve`
with the AIP_* variables; see `run_job.py serve --help` and trainer/serve.py).
"""

import sys
from pathlib import Path

# Run as a script: make the repo root importable (jobs/, infra/, trainer/).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from jobs.cli.run_job import main  # noqa: E402 - after the path setup above

if __name__ == "__main__":
    sys.exit(main(description=__doc__))
