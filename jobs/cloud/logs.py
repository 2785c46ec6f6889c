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
window are kept, so memory stays bounded however long the job runs. A read that fails (permission denied,
quota) prints one warning and ends the streaming; the job is still followed.
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from typing import Any, TextIO

from jobs.cloud.client import CloudLogs, job_id_of
from jobs.definition.errors import printable

# An entry older than the newest one seen by at most this much is still shown when it arrives late.
OVERLAP_SECONDS = 30
# After the job ends, one more read this long after (ingestion lags the replica's print).
GRACE_SECONDS = 10.0
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
    trial before the replica in a study; escaped so a job's output cannot rewrite the terminal."""
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
    return [printable(f"[{who}] {severity} {line}", keep="\t") for line in lines]


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

    def filter(self) -> str:
        terms = ['resource.type="ml_job"', f'resource.labels.job_id="{self.job_id}"']
        if self.lower is not None:
            terms.append(f'timestamp>="{format_nanos(self.lower)}"')
        return " AND ".join(terms)

    def poll(self) -> int:
        """Print the entries that arrived since the last poll (every page of them); how many were new."""
        if not self.active:
            return 0
        query, token, new = self.filter(), "", 0
        try:
            while True:
                entries, token = self.logs.list(self.project, query, token)
                new += self._show(entries)
                if not token:
                    return new
        except Exception as exc:  # noqa: BLE001 - a log read never stops the follow: say why, stop reading
            self.active = False
            reason = printable(" ".join(str(exc).split()) or type(exc).__name__)  # the server's words
            print(
                f"logs: cannot read the job's log entries ({reason}); log streaming stopped, the job is "
                "still followed (reading them needs logging.logEntries.list on the project: "
                "roles/logging.viewer, which job_submitters hold)",
                file=self.out,
                flush=True,
            )
            return new

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
            # The next read starts at the new lower bound: nothing older can come back, so forget it.
            self.seen = {k: t for k, t in self.seen.items() if t >= self.lower}
        return len(fresh)
