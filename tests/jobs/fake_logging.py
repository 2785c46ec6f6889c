"""Cloud Logging's entries.list for the fake REST endpoint of tests/jobs/fake_vertex.py (same local server,
path /v2/entries:list): scripted log entries that become visible as the followed job is polled, filtered and
paged the way the real method does it, every request recorded (body, when it came, what it returned).

Time is the job's poll count: an entry scripted at poll N is visible to reads made once the job has been
polled N times; at (N, R) only from the R-th read after that poll on (0-based), which is how an entry
ingested late, after the job's final state was seen, is scripted. A request can be scripted to fail (by its
place among all requests): an error answer with its headers, or ``RESET``, the connection closed with no
answer at all."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

RESET = "reset"  # a scripted failure: the server drops the connection without answering
# The filter terms the logs reader writes: `field="value"` and `field>="value"`, joined by AND.
_TERM = re.compile(r'([\w.]+)(>=|=)"([^"]*)"')


def sortable(timestamp: str) -> str:
    """An RFC 3339 UTC timestamp with nine fractional digits, so timestamps compare as strings."""
    head, _, fraction = timestamp.removesuffix("Z").partition(".")
    return f"{head}.{fraction.ljust(9, '0')}Z"


def entry(
    insert_id,
    timestamp,
    text=None,
    *,
    job="1000",
    task="workerpool0-0",
    severity="INFO",
    trial=None,
    json=None,
):
    """A LogEntry as Vertex AI writes one for a replica's line (textPayload, or jsonPayload)."""
    found = {
        "insertId": insert_id,
        "timestamp": timestamp,
        "severity": severity,
        "resource": {
            "type": "ml_job",
            "labels": {"job_id": job, "task_name": task, "project_id": "demo-project"},
        },
        "logName": "projects/demo-project/logs/workerpool0-0",
    }
    if json is not None:
        found["jsonPayload"] = json
    else:
        found["textPayload"] = text
    if trial is not None:
        found["labels"] = {"ml.googleapis.com/trial_id": str(trial)}
    return found


@dataclass
class LogRequest:
    body: dict
    poll: int  # how many times the job had been polled when it came
    read: int  # how many reads (first pages) had come since that poll
    returned: list[str] = field(default_factory=list)  # insertIds of the entries it returned


@dataclass
class FakeLogging:
    # (when, entry): when is a poll count N, or (N, R) for the R-th read after poll N (see the docstring).
    script: list[tuple[int | tuple[int, int], dict]] = field(default_factory=list)
    page_size: int = 1000  # the server's own page size cap, to exercise paging
    error: tuple[int, dict] | None = None  # every request answered with this (status, body)
    # Request number (0-based, every request counts) -> its failure: (status, body, headers), or RESET.
    failures: dict[int, tuple[int, dict, dict] | str] = field(default_factory=dict)
    requests: list[LogRequest] = field(default_factory=list)

    def write(self, when: int | tuple[int, int], *entries: dict) -> None:
        self.script += [(when, e) for e in entries]

    def first_seen(self) -> dict[str, tuple[int, int]]:
        """insertId -> (poll, read) of the first request that returned it."""
        seen: dict[str, tuple[int, int]] = {}
        for request in self.requests:
            for insert_id in request.returned:
                seen.setdefault(insert_id, (request.poll, request.read))
        return seen

    def list_entries(self, body: dict, poll: int) -> tuple[int, dict] | tuple[int, dict, dict] | str:
        token = body.get("pageToken")
        read = sum(1 for r in self.requests if r.poll == poll and not r.body.get("pageToken"))
        request = LogRequest(body, poll, read - 1 if token else read)
        self.requests.append(request)
        failure = self.failures.get(len(self.requests) - 1)
        if failure is not None:
            return failure
        if self.error:
            return self.error
        terms = _TERM.findall(body.get("filter", ""))
        if " AND ".join(f'{f}{op}"{v}"' for f, op, v in terms) != body.get("filter"):
            return 400, {"error": {"code": 400, "message": "unparsable filter", "status": "INVALID_ARGUMENT"}}
        now = (poll, request.read)
        visible = sorted(
            (
                e
                for when, e in self.script
                if (when if isinstance(when, tuple) else (when, 0)) <= now
                and all(_matches(e, t) for t in terms)
            ),
            key=lambda e: (sortable(e["timestamp"]), e["insertId"]),
        )
        start = int(token or 0)
        end = start + min(int(body.get("pageSize", 1000)), self.page_size)
        page = {"entries": visible[start:end]}
        if end < len(visible):
            page["nextPageToken"] = str(end)
        request.returned = [e["insertId"] for e in page["entries"]]
        return 200, page


def _matches(found: dict, term: tuple[str, str, str]) -> bool:
    path, op, wanted = term
    value = found
    for key in path.split("."):
        value = value.get(key) if isinstance(value, dict) else None
    if op == ">=":
        return value is not None and sortable(str(value)) >= sortable(wanted)
    return value == wanted
