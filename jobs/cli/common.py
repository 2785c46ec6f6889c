"""What the command lines share: exit statuses, a one-line argparse, how a plan and a cloud failure print,
and what a write error on stdout does (``guard_stdout``).

Imports no command (run_job.py, convert.py, build_image.py import it), so the commands never import each other
for these; only run_job.py imports convert.py, its subcommand.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from typing import TextIO, TypeVar

T = TypeVar("T")
EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130
# A write error on stdout (a full disk, a reader that went away): 1, a failure that is not bad input, as in
# Python's own recipe for a closed pipe (library/signal.html, "Note on SIGPIPE").
EXIT_STDOUT_FAILED = 1
# argparse's message repeats the argument it refused; a longer message is cut (the flag's name comes first).
MESSAGE_LIMIT = 200


class Parser(argparse.ArgumentParser):
    """argparse whose usage errors are one line, like every other bad input here (not usage + error)."""

    def error(self, message: str):  # noqa: D102 - argparse hook
        from jobs.api import one_line, short

        message = one_line(short(message, MESSAGE_LIMIT, quote=False))
        print(f"{self.prog}: error: {message} (see --help)", file=sys.stderr)
        raise SystemExit(EXIT_BAD_INPUT)


class StdoutFailed(BaseException):
    """A write to stdout failed. Not an Exception: it ends the command wherever it happens, as Ctrl-C does,
    and no catch-all for a cloud failure takes it for one."""


class _GuardedStdout:
    """sys.stdout, whose write errors become StdoutFailed (argparse would drop an OSError from its help).

    Each write is flushed: a failure shows at the write that failed, before stderr's next line (a plan,
    "converted ...") says otherwise and before anything else starts (a server, a local job's replicas)."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            written = self._stream.write(text)
            self._stream.flush()
        except OSError as exc:
            raise StdoutFailed(exc) from exc
        return written

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as exc:
            raise StdoutFailed(exc) from exc

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def guard_stdout(main: Callable[[], int | None], prog: str) -> int | str | None:
    """Run a command line's ``main`` (the entry point of a script) with a write error on stdout, in any verb,
    made one line on stderr and exit status EXIT_STDOUT_FAILED instead of a traceback (or, for argparse's
    help, a silent exit 0). Returns the status for sys.exit."""
    real = sys.stdout
    if real is None:  # no stdout at all (pythonw, a closed descriptor): nothing to guard
        return main()
    guarded = sys.stdout = _GuardedStdout(real)
    try:
        try:
            status = main()
        except SystemExit as exc:  # argparse's --help and usage errors
            status = exc.code
        guarded.flush()  # what was written around this wrapper (sys.stdout.buffer)
        return status
    except StdoutFailed as failed:
        cause = failed.__cause__
        why = getattr(cause, "strerror", None) or str(cause)
        _to_devnull(real)  # the interpreter flushes stdout again at exit: let that succeed
        try:
            print(f"{prog}: error: cannot write to stdout ({why}); the output is incomplete", file=sys.stderr)
            sys.stderr.flush()
        except OSError:  # stderr is gone too (`2>&1 | head`): the exit status says it
            _to_devnull(sys.stderr)
        return EXIT_STDOUT_FAILED
    finally:
        sys.stdout = real


def _to_devnull(stream: TextIO) -> None:
    """Point ``stream``'s file descriptor at /dev/null (Python's recipe for a closed pipe)."""
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):  # not a file (a test's StringIO): nothing left to flush
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)


def print_plan(plan, err: TextIO) -> None:
    """The steps, then each build request and the model upload request in full: the job request alone is on
    stdout, pipeable as is."""
    print("plan (not executed):\n  " + "\n  ".join(plan.describe()), file=err)
    for line in plan.cost_lines():
        print(line, file=err)
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
    recording = plan.experiment_requests()
    if recording:
        print("Vertex AI Experiments requests (MetadataService, sent once the job has ended; <...> are "
              "filled in then; a create that finds its resource goes on, the run's context is updated):",
              file=err)
        print(json.dumps([{"method": m, "request": r} for m, r in recording], indent=2), file=err)
    deploy = plan.deploy_request()
    if deploy is not None:
        print("deploy request (sent once the version is registered, unless it is deployed there already; "
              "<...> are what the endpoint serves then):", file=err)
        print(json.dumps(deploy, indent=2), file=err)


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


def guarded(action: Callable[[], T], err: TextIO) -> tuple[int, T | None]:
    """``(0, action())``, or what a read-only command's failure exits with and nothing: bad input one line
    and EXIT_BAD_INPUT, Ctrl-C EXIT_INTERRUPTED, a cloud/auth failure one line and 1 (``cloud_failure``)."""
    from jobs.api import JobError

    try:
        return 0, action()
    except JobError as exc:
        print(str(exc), file=err)
        return EXIT_BAD_INPUT, None
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED, None
    except Exception as exc:  # noqa: BLE001 - cloud/auth failures: one line, no traceback
        return cloud_failure(exc, err), None
