#!/usr/bin/env python3
"""Build the trainer image variants with Cloud Build, unless Artifact Registry already has their tags.

Usage (from the repo root, with .venv/bin/python or after `. .venv/bin/activate`):
  python scripts/build_image.py --env prod                       # cpu, gpu and tpu: build what is missing
  python scripts/build_image.py --env dev --variant cpu --dry-run  # the plan and the exact build requests
  python scripts/build_image.py --print-tag                      # this checkout's tags, as JSON
  python scripts/build_image.py --local cpu                      # here, with Docker or Podman (make image)

Each image is <trainer_image>:<variant>-<hash>, the hash covering the build context that .dockerignore lets
through (Dockerfile, pinned requirements, trainer code): the same tag run_job.py uses for the job definitions,
so a job submitted after the deploy workflow ran this finds its image built. The build context is uploaded to
the staging bucket and built as the stack's builder service account. Exit status: 0 built or present; 1 a
build failed (its log link is printed) or a cloud error; 2 bad input; 130 interrupted (builds keep running;
run again to follow them).

--local VARIANT builds with this machine's engine instead, as localhost/trainer:<variant>-<hash> (the same
hash), unless that tag exists, and prints the image's name; where no registry can be reached the Dockerfile's
BASE_IMAGE is a local Debian bookworm base bootstrapped once with debootstrap (jobs/local/base_image.py). gpu
needs --allow-large (1.9 GB of CUDA wheels). Exit status: 0 built or present; 1 the build failed (the step is
named); 2 no engine, or a refused variant.
"""

import sys
from pathlib import Path

# Run as a script: make the repo root importable (jobs/, infra/).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from jobs.cli.build_image import main  # noqa: E402 - after the path setup above
from jobs.cli.common import guard_stdout  # noqa: E402

if __name__ == "__main__":
    sys.exit(guard_stdout(lambda: main(description=__doc__), "build_image.py"))
