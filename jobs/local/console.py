"""The console of a local CustomJob (``run_job.py FILE --local``): the trainer's progress lines, read from the
chief replica's log as it grows and printed through ``jobs/console.py`` while the runner waits, then the
closing lines from the ``metrics.json`` the chief wrote beside its SavedModel.

The runner keeps the replica logs whole (``replica-logs/``); only the progress lines reach the console. The
final ``result`` line is left to :func:`closing`, which reads ``metrics.json`` as ``run_job.py report`` does.
A study's console is its own (``tuning.py``: a line per trial and the study report).
"""

from __future__ import annotations

import stat
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from jobs import console
from jobs.local.launcher import JobRun
from trainer.contract import METRICS_FILE, PROGRESS_MAX_CHARS

POLL_S = 0.2
READ_BYTES = 1 << 20  # the most of the log one poll reads: a flood is caught up with over later polls


class ChiefLog:
    """The progress lines of one log file, printed once each as the file grows (a restarted replica
    appends to it: its lines follow)."""

    def __init__(self, path: Path, out: TextIO) -> None:
        self.path = path
        self.out = out
        self.offset = 0
        self.pending = b""  # the start of a line not ended yet
        self.skipping = False  # inside a line too long to be progress: dropped up to its end

    def poll(self) -> None:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                chunk = f.read(READ_BYTES)
        except OSError:
            return  # not there yet
        self.offset += len(chunk)
        *lines, rest = (self.pending + chunk).split(b"\n")
        for raw in lines:
            if not self.skipping:
                self.show(raw.decode("utf-8", errors="replace"))
            self.skipping = False
        self.pending = rest
        if len(rest) > PROGRESS_MAX_CHARS:
            self.pending, self.skipping = b"", True

    def show(self, line: str) -> None:
        event = console.parse(line)
        if event is None or event["event"] == "result":
            return
        for text in console.render(event):
            print(text, file=self.out, flush=True)


def wait(run: JobRun, log: ChiefLog, until: Callable[[], bool] = lambda: False, interval: float = POLL_S
         ) -> int | None:
    """Show the chief's progress (``log``) until the job ends (its exit status) or ``until()`` (None)."""
    while (rc := run.poll()) is None and not until():
        log.poll()
        time.sleep(interval)
    log.poll()
    return rc


def closing(model_dir: Path) -> list[str]:
    """The closing lines of a run whose SavedModel is ``model_dir``: its eval metrics and baselines from the
    ``metrics.json`` there."""
    metrics, _ = read_metrics(model_dir / METRICS_FILE)
    evaluation, baselines, _ = console.metrics_parts(metrics)  # its notes were shown as the run went
    return console.closing_lines(str(model_dir), evaluation, baselines)


def read_metrics(path: Path) -> tuple[Any, str | None]:
    """(the parsed metrics.json at ``path``, None), or (None, why it is not read): a regular file of at most
    ``console.METRICS_LIMIT`` bytes (a FIFO would block the open)."""
    try:
        if not stat.S_ISREG(path.stat().st_mode):
            return None, f"{path}: not a regular file, not read"
        with open(path, "rb") as f:
            data = f.read(console.METRICS_LIMIT + 1)
    except FileNotFoundError:
        return None, f"{path}: not found"
    except OSError as exc:
        return None, f"{path}: not readable ({exc.strerror or type(exc).__name__})"
    return console.parse_metrics(str(path), data)
