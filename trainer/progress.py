"""The trainer's progress as machine-readable log lines (``trainer.contract.PROGRESS_TAG`` and
``PROGRESS_EVENTS``), written beside its human lines, which stay as they are.

Only the chief writes them (``train.run`` calls :func:`configure`), so a job's console shows a run's
progress once however many replicas it has. They are logged at INFO whatever ``--verbosity`` hides of the
human lines: the job tooling's console is made of them (``jobs/console.py``).

    from trainer import progress
    with progress.stage("ratings") as done:
        ratings = read()
        done["detail"] = f"{len(ratings)} ratings"    # one progress line (and one human line) when it ends
    progress.emit("note", text="...")
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager

from trainer.contract import PROGRESS_EVENTS, PROGRESS_TAG

log = logging.getLogger("trainer")
machine = logging.getLogger("trainer.progress")
machine.setLevel(logging.INFO)
_chief = [True]  # set per run by configure(): a process may run several (tests)


def configure(chief: bool) -> None:
    """Whether this replica writes progress lines: the chief only."""
    _chief[0] = chief


def emit(event: str, **fields) -> None:
    """One progress line of ``event`` with exactly its fields (a programming error otherwise)."""
    if set(fields) != set(PROGRESS_EVENTS[event]):
        raise ValueError(f"progress event {event!r} takes {PROGRESS_EVENTS[event]}, got {sorted(fields)}")
    if _chief[0]:
        machine.info("%s%s", PROGRESS_TAG, json.dumps({"event": event, **fields}, separators=(",", ":")))


def note(text: str) -> None:
    """A line the user should read: a human warning and its progress line."""
    log.warning("%s", text)
    emit("note", text=text)


@contextmanager
def stage(what: str, starting: str = "") -> Iterator[dict[str, str]]:
    """Time a step before training; when it ends without an exception, log ``what``, the ``detail`` the
    block put in the yielded dict and the seconds it took (a human line and a progress line). ``starting``:
    a step that can take minutes says so as it starts too (a progress line with no seconds)."""
    done = {"detail": ""}
    if starting:
        emit("stage", what=what, detail=starting, seconds=None)
    started = time.perf_counter()
    yield done
    seconds = round(time.perf_counter() - started, 1)
    log.info("%s: %s (%.1f s)", what, done["detail"], seconds)
    emit("stage", what=what, detail=done["detail"], seconds=seconds)
