"""What the command lines share: exit statuses, a one-line argparse, and how a plan and a cloud failure print.

Imports no command (run_job.py, convert.py, build_image.py import it), so the commands never import each other
for these; only run_job.py imports convert.py, its subcommand.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TextIO

EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130


class Parser(argparse.ArgumentParser):
    """argparse whose usage errors are one line, like every other bad input here (not usage + error)."""

    def error(self, message: str):  # noqa: D102 - argparse hook
        print(f"{self.prog}: error: {message} (see --help)", file=sys.stderr)
        raise SystemExit(EXIT_BAD_INPUT)


def print_plan(plan, err: TextIO) -> None:
    """The steps, then each build request and the model upload request in full: the job request alone is on
    stdout, pipeable as is."""
    print("plan (not executed):\n  " + "\n  ".join(plan.describe()), file=err)
    for build in plan.builds:
        print(f"build request for {build.image} (sent only if that tag is missing):", file=err)
        print(json.dumps(build.request, indent=2), file=err)
    upload = plan.upload_request()
    if upload is not None:
        model = f"{upload['parent']}/models/{upload['modelId']}"
        print(
            "model upload request (sent once the job succeeds, unless a version labelled with its job id "
            f"exists; <...> are filled in then; once the model exists, parentModel: {model} replaces "
            "modelId):",
            file=err,
        )
        print(json.dumps(upload, indent=2), file=err)


def cloud_failure(exc: BaseException, err: TextIO) -> int:
    """A cloud, auth or build failure: one line on ``err`` (no traceback), exit status 1."""
    message = " ".join(str(exc).split()) or type(exc).__name__
    if type(exc).__name__ == "DefaultCredentialsError":
        message = (
            "no Google Cloud credentials found; run `gcloud auth application-default login` (or set "
            "GOOGLE_APPLICATION_CREDENTIALS) and retry"
        )
    print(f"run_job.py: {type(exc).__name__}: {message}", file=err)
    return 1
