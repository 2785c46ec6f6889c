"""Several ``python -m trainer.task`` command lines run in ONE fresh interpreter, one after another.

A test of a run the trainer refuses or stops (exit status, one line on stderr, nothing written) checks what
the command line does as a process: its exit status and what reaches file descriptors 1 and 2 (TensorFlow's
C++ logging included). A subprocess per command line pays the import of TensorFlow and the task's modules
(5-10 s of CPU on two cores) every time; this runner pays it once per batch. Each command line runs as
``python -m trainer.task`` runs it, ``sys.exit(main(argv))``: :func:`call_main` turns a SystemExit into the
status the interpreter would exit with and any other exception into a traceback on stderr and status 1,
with fds 1 and 2 sent to files of its own. The runner records each result as soon as it has it, so a signal
death names the command line it happened in (the first one without a result).

    python -m tests.trainer.cli_batch RUNS.json OUT.json   # RUNS: {name: argv after `-m trainer.task`}
"""

from __future__ import annotations

import json
import os
import sys
import traceback as tb
from collections.abc import Callable, Sequence
from pathlib import Path


def exit_status(exc: SystemExit) -> int:
    """The status the interpreter exits with for ``exc``; a message that is not a number goes to stderr."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=sys.stderr)
    return 1


def call_main(main: Callable[[Sequence[str]], int], argv: Sequence[str], stdout: Path,
              stderr: Path) -> tuple[int, str]:
    """``main(argv)`` as ``sys.exit(main())`` runs in a process of its own, fds 1 and 2 writing to the files
    ``stdout`` and ``stderr``: (exit status, the traceback printed for an exception other than SystemExit, or
    "")."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(stdout, "wb") as out, open(stderr, "wb") as err:
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
    traceback = ""
    try:
        status = main(argv)
    except SystemExit as exc:
        status = exit_status(exc)
    except BaseException:  # what the interpreter prints for an uncaught exception, and its status
        traceback, status = tb.format_exc(), 1
        print(traceback, end="", file=sys.stderr)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, copy in zip((1, 2), saved, strict=True):
            os.dup2(copy, fd)
            os.close(copy)
    return status, traceback


def run(runs: Path, out: Path) -> None:
    from trainer import task

    results: dict[str, dict] = {}
    for i, (name, argv) in enumerate(json.loads(runs.read_text()).items()):
        folder = out.parent / f"{out.stem}-{i}"
        folder.mkdir(parents=True, exist_ok=True)
        status, _ = call_main(task.main, argv, folder / "stdout", folder / "stderr")
        results[name] = {"status": status, "stdout": (folder / "stdout").read_text(errors="replace"),
                         "stderr": (folder / "stderr").read_text(errors="replace")}
        out.write_text(json.dumps(results))


if __name__ == "__main__":
    run(Path(sys.argv[1]), Path(sys.argv[2]))
