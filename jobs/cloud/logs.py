"""A followed job's log entries from Cloud Logging, printed as they arrive (what `gcloud ai custom-jobs
stream-logs` shows), between the state lines of jobs.cloud.plan.follow.

Vertex AI writes what a job's replicas print, and its own service messages, under the monitored resource
``ml_job`` with ``resource.labels.job_id`` the job's numeric id and ``resource.labels.task_name`` the replica
(``workerpool0-0``, ...; ``service`` for Vertex AI's own lines); a tuning job's trials log under the tuning
job's id with the trial in the entry label ``ml.googleapis.com/trial_id`` (the filter and labels gcloud's
stream-logs reads). Each line shows the replica, the trial for a study, and the severity.

Cloud Logging has no push: each poll lists the entries from ``OVERLAP_SECONDS`` before the newest one seen
(an entry is ingested up to seconds after its timestamp, so one that arrives late with an older timestamp is
still found), all pages of them, and skips those already printed by insertId. Only the insertIds inside that
window are kept (at most ``MAX_SEEN``), so memory stays bounded however long the job runs.

A read that fails for a while (entries.list's quota of 60 reads a minute per project, shared by every job
followed there; a server error; a dropped connection) is retried: the next reads are skipped until a backoff
has passed (doubling from ``BACKOFF_FIRST`` to ``BACKOFF_MAX``, or the wait the server asked for), one warning
says so, and the read that succeeds starts where the last one shown left off, so nothing is shown twice or
left out. The job's state is polled meanwhile as always, so its end is seen on time; then a failing read is
retried for ``FINAL_RETRY_SECONDS`` more, and entries still unread are named with the command that shows them.
A read the credentials may not make (401, 403), or that can never succeed (a bad filter), ends the
streaming with one line; the job is still followed.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any, TextIO

from jobs import console
from jobs.cloud.client import CloudLogs, LogReadError, job_id_of
from jobs.definition.errors import printable

# An entry older than the newest one seen by at most this much is still shown when it arrives late.
OVERLAP_SECONDS = 30
# After the job ends, one more read this long after (ingestion lags the replica's print).
GRACE_SECONDS = 10.0
# A failed read waits this long before the next, doubling up to BACKOFF_MAX: the quota's own window, after
# which its 60 reads are there again.
BACKOFF_FIRST = 5.0
BACKOFF_MAX = 60.0
# After the job ends, a failing read is retried for at most this long: the follow must end.
FINAL_RETRY_SECONDS = 60.0
# The most insertIds kept to skip entries already shown: a job writing more than this within the overlap
# window has the window shortened instead (entries arriving that late then go unseen, none shows twice).
MAX_SEEN = 50_000
_now = time.monotonic  # replaced in tests
TRIAL_LABELS = ("ml.googleapis.com/trial_id", "trial_id")
TASK_LABELS = ("ml.googleapis.com/task_name", "task_name")
_TIMESTAMP = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d)")
_NANOS = 1_000_000_000


def timestamp_nanos(text: Any) -> int | None:
    """An RFC 3339 timestamp (up to nanoseconds, as Cloud Logging writes them) as nanoseconds since 1970."""
    found = _TIMESTAMP.fullmatch(text) if isinstance(text, str) else None
    if not found:
        return None
    zone = "+00:00" if found.group(3) == "Z" else found.group(3)
    seconds = datetime.fromisoformat(found.group(1) + zone).timestamp()
    return int(seconds) * _NANOS + int((found.group(2) or "").ljust(9, "0"))


def format_nanos(nanos: int) -> str:
    seconds, fraction = divmod(nanos, _NANOS)
    return f"{datetime.fromtimestamp(seconds, timezone.utc):%Y-%m-%dT%H:%M:%S}.{fraction:09d}Z"


def entry_lines(entry: dict[str, Any], study: bool) -> list[str]:
    """The printed lines of one entry: ``[<replica>] SEVERITY message``, a line per line of the message, the
    trial before the replica in a study; escaped so a job's output cannot rewrite the terminal. A trainer's
    progress line shows as its console line (``[<replica>] epoch 3/8  loss ...``: jobs/console.py)."""
    labels = entry.get("labels") or {}
    resource = (entry.get("resource") or {}).get("labels") or {}
    task = resource.get("task_name") or next((labels[k] for k in TASK_LABELS if labels.get(k)), "?")
    trial = next((labels[k] for k in TRIAL_LABELS if labels.get(k)), None)
    who = f"trial {trial} {task}" if study and trial else task
    severity = entry.get("severity") or "DEFAULT"
    if "textPayload" in entry:
        message = str(entry["textPayload"])
    else:
        payload = entry.get("jsonPayload") or {}
        message = str(payload.get("message") or (json.dumps(payload, sort_keys=True) if payload else ""))
    # Lines end at \n only: a bare \r (a progress bar redrawing itself) is escaped like any control code.
    lines = message.replace("\r\n", "\n").rstrip("\n").split("\n")
    shown = []
    for line in lines:
        event = console.parse(line)  # the trainer's progress: its console line(s) (jobs/console.py) instead
        if event is None:
            shown.append(printable(f"[{who}] {severity} {line}", keep="\t"))
        else:
            shown += [f"[{printable(who)}] {text}" for text in console.render(event)]
    return shown


class LogStream:
    """The log entries of one job, printed once each in timestamp order as polls find them."""

    def __init__(
        self, logs: CloudLogs, project: str, job_name: str, *, study: bool, out: TextIO, since: str = ""
    ) -> None:
        self.logs = logs
        self.project = project
        self.job_id = job_id_of(job_name)
        self.study = study
        self.out = out
        self.lower = timestamp_nanos(since)  # the lower bound of the next read: the job's createTime at first
        self.seen: dict[str, int] = {}  # insertId -> timestamp, of the entries inside the overlap window
        self.active = True
        self.failures = 0  # failed reads in a row
        self.retry_at: float | None = None  # while reads fail: when (_now) the next may be made
        self.reason = ""  # why the last read failed
        self.warned = False

    def filter(self) -> str:
        terms = ['resource.type="ml_job"', f'resource.labels.job_id="{self.job_id}"']
        if self.lower is not None:
            terms.append(f'timestamp>="{format_nanos(self.lower)}"')
        return " AND ".join(terms)

    def poll(self) -> int:
        """Print the entries that arrived since the last read (every page of them); how many were new. While
        reads fail, nothing until the backoff has passed."""
        if not self.active or (self.retry_at is not None and _now() < self.retry_at):
            return 0
        query, token, new = self.filter(), "", 0
        try:
            while True:
                entries, token = self.logs.list(self.project, query, token)
                new += self._show(entries)  # moves the lower bound: a retry resumes after these
                if not token:
                    break
        except Exception as exc:  # noqa: BLE001 - a log read never stops the follow: say why, maybe retry
            self._failed(exc)
            return new
        self.failures, self.retry_at = 0, None
        return new

    def finish(self, sleep: Callable[[float], None]) -> None:
        """After the job ended: a failing read is retried as its backoff allows for FINAL_RETRY_SECONDS; the
        entries still unread then are named, with the command that shows them."""
        deadline = _now() + FINAL_RETRY_SECONDS
        while self.active and self.retry_at is not None and self.retry_at <= deadline:
            sleep(max(0.0, self.retry_at - _now()))
            self.poll()
        if self.active and self.retry_at is not None:
            self.active = False
            since = f"from {format_nanos(self.lower)} on " if self.lower is not None else ""
            self._say(
                f"logs: the job has ended and its log entries {since}could not be read ({self.reason}); "
                f"`gcloud logging read '{self.filter()}' --project={self.project} --order=asc` shows them"
            )

    def _failed(self, exc: Exception) -> None:
        self.reason = printable(" ".join(str(exc).split()) or type(exc).__name__)  # the server's words
        if not (isinstance(exc, LogReadError) and exc.transient):
            self.active = False
            needs = (
                " (reading them needs logging.logEntries.list on the project: roles/logging.viewer, which "
                "job_submitters hold)"
                if isinstance(exc, LogReadError) and exc.denied
                else ""
            )
            self._say(
                f"logs: cannot read the job's log entries ({self.reason}); log streaming stopped, the job is "
                f"still followed{needs}"
            )
            return
        self.failures += 1
        backoff = min(BACKOFF_FIRST * 2 ** (self.failures - 1), BACKOFF_MAX)
        self.retry_at = _now() + (backoff if exc.retry_after is None else exc.retry_after)
        if not self.warned:  # quota errors are routine with several jobs followed: once is enough
            self.warned = True
            self._say(
                f"logs: reading the job's log entries failed ({self.reason}); retrying with backoff, from "
                "the last entry shown (later failures are not reported), the job is still followed"
            )

    def _say(self, line: str) -> None:
        print(line, file=self.out, flush=True)

    def _show(self, entries: list[dict[str, Any]]) -> int:
        fresh = []
        for entry in entries:
            key = str(entry.get("insertId") or json.dumps(entry, sort_keys=True))
            if key not in self.seen:
                nanos = timestamp_nanos(entry.get("timestamp"))
                self.seen[key] = nanos if nanos is not None else (self.lower or 0)
                fresh.append((self.seen[key], key, entry))
        for _, _, entry in sorted(fresh, key=lambda item: item[:2]):
            for line in entry_lines(entry, self.study):
                print(line, file=self.out)
        if fresh:
            self.out.flush()
        newest = max(self.seen.values(), default=None)
        if newest is not None:
            self.lower = max(self.lower or 0, newest - OVERLAP_SECONDS * _NANOS)
            if len(self.seen) > MAX_SEEN:  # a flood inside the window: keep the newest, read after them
                self.lower = max(self.lower, sorted(self.seen.values())[-MAX_SEEN])
            # The next read starts at the new lower bound: nothing older can come back, so forget it.
            self.seen = {k: t for k, t in self.seen.items() if t >= self.lower}
        return len(fresh)
