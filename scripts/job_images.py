#!/usr/bin/env python3
"""Which image and which TensorFlow each job definition runs the trainer on, and whether validation passes.

Usage (from the repo root, with .venv/bin/python or after `. .venv/bin/activate`; offline, no TensorFlow):
  python scripts/job_images.py                     # every jobs/*.yaml, with the dev environment's outputs
  python scripts/job_images.py jobs/census_tpu.yaml --env prod

For the trainer image the versions are the pins of docker/requirements-<variant>.txt (what the Dockerfile
installs); for a Vertex AI prebuilt image, the TensorFlow its name carries. The check is run_job.py's own
validation (the image must fit the machine, a prebuilt image must be TensorFlow >= 2.17 with Keras 3).
Exit status 1 when any definition fails its check, 2 on bad input (one line).
"""

import argparse
import re
import sys
from datetime import datetime, timezone
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from jobs.api import DEFAULT_ENV, compile_file, load_outputs  # noqa: E402 - after the path setup above
from jobs.definition.body import split_image  # noqa: E402
from jobs.definition.errors import JobError  # noqa: E402
from jobs.definition.image import parse_prebuilt, variant_for_machine  # noqa: E402


def pinned(variant: str, package: str) -> str:
    text = (REPO_ROOT / "docker" / f"requirements-{variant}.txt").read_text(encoding="utf-8")
    found = re.search(rf"^{re.escape(package)}==([^\s\\]+)", text, re.M)
    return found.group(1) if found else "?"


def stack(pool: dict, trainer_image: str) -> tuple[str, str, str]:
    """(image, TensorFlow, Keras) a pool runs the trainer on."""
    if "pythonPackageSpec" in pool:
        uri = pool["pythonPackageSpec"].get("executorImageUri", "")
        found = parse_prebuilt(uri)
        tf = f"{found.framework} {found.version[0]}.{found.version[1]}" if found else "?"
        return uri.rsplit("/", 1)[-1], tf, "(image's)"
    uri = (pool.get("containerSpec") or {}).get("imageUri", "")
    if split_image(uri)[0] != trainer_image:
        return uri, "?", "?"
    variant = variant_for_machine(pool.get("machineSpec") or {})
    tf = pinned(variant, "tensorflow-tpu" if variant == "tpu" else "tensorflow")
    return uri.rsplit("/", 1)[-1], tf, pinned(variant, "keras")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("files", nargs="*", type=Path, help="job definitions (default: jobs/*.yaml)")
    parser.add_argument("--env", default=DEFAULT_ENV)
    args = parser.parse_args(argv)
    files = args.files or sorted((REPO_ROOT / "jobs").glob("*.yaml"))
    try:
        outputs = load_outputs(args.env, None, "job_images.py")
    except JobError as exc:  # bad input: one line, exit 2, like run_job.py
        print(str(exc), file=sys.stderr)
        return 2
    print(f"{'job':<20} {'pool':<5} {'image':<30} {'tensorflow':<11} {'keras':<10} check")
    failed = 0
    for path in files:
        try:  # what `run_job.py FILE --dry-run --env ENV` compiles and validates
            job = compile_file(
                str(path),
                env=args.env,
                overrides=(),
                outputs=outputs,
                repo_root=REPO_ROOT,
                now=datetime.now(timezone.utc),
            )
            verdict, pools = "pass", job.worker_pools()
        except JobError as exc:
            failed += 1
            verdict, pools = f"FAIL {exc}", []
        for i, (_, pool) in enumerate(pools or [("", {})]):
            image, tf, keras = stack(pool, outputs.get("trainer_image", "")) if pool else ("-", "-", "-")
            print(f"{path.stem:<20} {i:<5} {image:<30} {tf:<11} {keras:<10} {verdict}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
