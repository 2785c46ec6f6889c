"""Following a job streams its log entries from Cloud Logging (jobs/cloud/logs.py): run_job.py in-process
against the fake REST endpoint, whose entries.list (tests/jobs/fake_logging.py) reveals scripted entries as
the job is polled. The job runs on the trainer image the fake registry has, so nothing is built."""

from __future__ import annotations

import io
import re

import pytest

import jobs.cloud.logs
import jobs.cloud.plan
from jobs.cloud.client import log_read_error
from jobs.cloud.logs import LogStream, format_nanos, timestamp_nanos
from tests.jobs.fake_logging import RESET, entry
from tests.jobs.fake_vertex import FakeVertex, FakeVertexServer
from tests.jobs.helpers import JOBS_DIR, run_cli

# Followed jobs and builds are polled without waiting (tests/jobs/conftest.py).
pytestmark = pytest.mark.usefixtures("no_poll_sleep")

CPU = JOBS_DIR / "census_cpu.yaml"
STUDY = JOBS_DIR / "census_tuning.yaml"
RUNNING = ["JOB_STATE_PENDING", "JOB_STATE_RUNNING", "JOB_STATE_RUNNING", "JOB_STATE_SUCCEEDED"]
# The fake stamps the first job it creates 2026-01-02T03:04:00Z (its createTime).
T0 = "2026-01-02T03:04:"


@pytest.fixture
def server():
    with FakeVertexServer(FakeVertex(states=list(RUNNING))) as running:
        yield running


def follow(server, tmp_path, *args, path=None):
    if path is None:  # census_cpu.yaml without its registry block: following is what these tests are about
        path = tmp_path / CPU.name
        path.write_text(re.sub(r"\nregistry:\n(?:  .*\n)+", "\n", CPU.read_text()))
    rc, out, err = run_cli([path, *args], factory=server.factory(tmp_path))
    # Recording the run in Vertex AI Experiments follows the final state (tests/jobs/test_experiments.py).
    return rc, [line for line in out.splitlines() if not line.startswith("experiments: ")], err


def test_entries_appear_in_the_poll_they_are_written_in_with_replica_and_severity(server, tmp_path):
    logging = server.fake.logging
    logging.write(0, entry("a", T0 + "01Z", "Waiting for training program to start.", task="service"))
    logging.write(1, entry("b", T0 + "10.5Z", "Epoch 1/2"), entry("c", T0 + "11Z", "Epoch 2/2"))
    logging.write(2, entry("d", T0 + "12Z", json={"message": "reading shard 1"}, task="workerpool1-0"))
    logging.write(
        3, entry("e", T0 + "13Z", "Traceback (most recent call last):\n  ValueError", severity="ERROR")
    )
    logging.write((3, 1), entry("f", T0 + "14Z", "Killed: out of memory", severity="ERROR"))  # ingested late
    rc, lines, err = follow(server, tmp_path)
    assert rc == 0, err
    start = next(i for i, line in enumerate(lines) if "JOB_STATE_PENDING" in line)
    assert [line.split("] ", 1)[-1] if line.startswith("[00:") else line for line in lines[start:]] == [
        "JOB_STATE_PENDING",
        "[service] INFO Waiting for training program to start.",
        "JOB_STATE_RUNNING",
        "[workerpool0-0] INFO Epoch 1/2",
        "[workerpool0-0] INFO Epoch 2/2",
        "[workerpool1-0] INFO reading shard 1",
        "[workerpool0-0] ERROR Traceback (most recent call last):",
        "[workerpool0-0] ERROR   ValueError",
        "[workerpool0-0] ERROR Killed: out of memory",  # the read after the grace, before the final state
        "JOB_STATE_SUCCEEDED",
    ]
    # The lag: each entry is first returned by the read made in the poll it was written in (0 polls late).
    written = {e["insertId"]: (when if isinstance(when, tuple) else (when, 0)) for when, e in logging.script}
    assert logging.first_seen() == written
    request = logging.requests[0].body
    assert request["resourceNames"] == ["projects/demo-project"] and request["orderBy"] == "timestamp asc"
    assert request["filter"] == (
        'resource.type="ml_job" AND resource.labels.job_id="1000" '
        'AND timestamp>="2026-01-02T03:04:00.000000000Z"'
    )


def test_a_study_names_the_trial_of_each_line(server, tmp_path):
    server.fake.logging.write(
        1,
        entry("a", T0 + "05Z", "accuracy=0.81", trial=1),
        entry("b", T0 + "06Z", "accuracy=0.85", trial=2, task="workerpool1-0"),
        entry("c", T0 + "07Z", "Trial 3 is starting", task="service"),
    )
    rc, lines, err = follow(server, tmp_path, path=STUDY)
    assert rc == 0, err
    assert [line for line in lines if line.startswith("[t") or line.startswith("[s")] == [
        "[trial 1 workerpool0-0] INFO accuracy=0.81",
        "[trial 2 workerpool1-0] INFO accuracy=0.85",
        "[service] INFO Trial 3 is starting",
    ]


def test_the_trainers_progress_lines_show_as_the_console_of_the_run(server, tmp_path):
    """A single run's console from its log stream: the progress lines (jobs/console.py renders them) in place
    of the JSON, every other line as it was; the end: the eval beside the model folder."""
    progress = "2026-01-02 03:04:10,000 INFO trainer.progress: trainer-progress "
    server.fake.logging.write(
        1,
        entry("a", T0 + "05Z", "INFO trainer: data: train: 32561 rows", severity="ERROR"),
        entry("b", T0 + "06Z", progress + '{"event":"epoch","epoch":1,"epochs":8,"seconds":2.5,'
              '"train":{"loss":0.35,"auc":0.88},"val":{"loss":0.30,"auc":0.914}}', severity="ERROR"),
    )
    server.fake.logging.write(2, entry("c", T0 + "20Z", progress + '{"event":"result","model_dir":'
                                       '"gs://m/census/model/","eval":{"loss":0.2767,"auc":0.9274},"baselines":{}}'))
    rc, lines, err = follow(server, tmp_path)
    assert rc == 0, err
    assert [line for line in lines if line.startswith("[workerpool0-0]")] == [
        "[workerpool0-0] ERROR INFO trainer: data: train: 32561 rows",
        "[workerpool0-0] epoch 1/8  loss 0.3500  auc 0.8800 | val loss 0.3000  auc 0.9140 (2.5 s)",
        "[workerpool0-0]   SavedModel: gs://m/census/model/",
        "[workerpool0-0]   eval: loss 0.2767  auc 0.9274",
    ]


def test_overlapping_reads_show_each_entry_once_and_late_ones_within_the_window(server, tmp_path):
    logging = server.fake.logging
    logging.write(0, entry("a", T0 + "10Z", "first"))
    logging.write(1, entry("b", T0 + "50Z", "second"))
    # Ingested late: 20 s older than the newest seen, inside the 30 s window; and 60 s older, outside it.
    logging.write(2, entry("c", T0 + "30Z", "late, shown"), entry("d", "2026-01-02T03:03:50Z", "too late"))
    rc, lines, err = follow(server, tmp_path)
    assert rc == 0, err
    shown = [line for line in lines if line.startswith("[workerpool")]
    assert shown == [
        "[workerpool0-0] INFO first",
        "[workerpool0-0] INFO second",
        "[workerpool0-0] INFO late, shown",
    ]
    # Each read starts 30 s before the newest entry seen so far, never before the job's creation.
    bounds = [r.body["filter"].rsplit('timestamp>="', 1)[1][:19] for r in logging.requests]
    assert bounds[:3] == ["2026-01-02T03:04:00", "2026-01-02T03:04:00", "2026-01-02T03:04:20"]


def test_every_page_is_read(server, tmp_path):
    server.fake.logging.page_size = 2
    server.fake.logging.write(0, *(entry(f"e{i}", f"{T0}0{i}Z", f"line {i}") for i in range(5)))
    rc, lines, err = follow(server, tmp_path)
    assert rc == 0, err
    assert [line for line in lines if line.startswith("[work")] == [
        f"[workerpool0-0] INFO line {i}" for i in range(5)
    ]
    first = server.fake.logging.requests[:3]
    assert [r.body.get("pageToken") for r in first] == [None, "2", "4"]
    assert len({r.body["filter"] for r in first}) == 1  # a page token goes with the filter it was issued for


def test_no_logs_follows_the_state_alone(server, tmp_path):
    server.fake.logging.write(0, entry("a", T0 + "01Z", "hello"))
    rc, lines, err = follow(server, tmp_path, "--no-logs")
    assert rc == 0, err
    assert server.fake.logging.requests == [] and "JOB_STATE_SUCCEEDED" in lines[-1]
    assert not any("hello" in line for line in lines)
    _, _, plan_without = run_cli([CPU, "--dry-run", "--no-logs"])
    _, _, plan_with = run_cli([CPU, "--dry-run"])
    assert "log entries" in plan_with and "log entries" not in plan_without


@pytest.fixture
def clock(monkeypatch, no_poll_sleep):
    """Polls 15 s apart on a clock that only sleeping moves: the waits follow() and the log stream make."""
    now = [0.0]

    def sleep(seconds):
        now[0] += seconds

    monkeypatch.setattr(jobs.cloud.plan, "POLL_SECONDS", 15.0)
    monkeypatch.setattr(jobs.cloud.plan, "_sleep", sleep)
    monkeypatch.setattr(jobs.cloud.logs, "_now", lambda: now[0])
    return now


def long_job(polls):
    """A job that runs for ``polls`` polls, then succeeds."""
    return FakeVertex(
        states=["JOB_STATE_PENDING", *["JOB_STATE_RUNNING"] * (polls - 1), "JOB_STATE_SUCCEEDED"]
    )


def quota(headers=None, details=()):
    error = {
        "code": 429,
        "message": "Quota exceeded",
        "status": "RESOURCE_EXHAUSTED",
        "details": list(details),
    }
    return 429, {"error": error}, headers or {}


UNAVAILABLE = (503, {"error": {"code": 503, "message": "try later", "status": "UNAVAILABLE"}}, {})


def shown(lines):
    return [line.split("] ", 1)[1] for line in lines if line.startswith("[workerpool")]


def test_failed_reads_are_retried_with_backoff_and_resume_with_no_duplicates_or_gaps(clock, tmp_path):
    with FakeVertexServer(long_job(8)) as server:
        logging = server.fake.logging
        logging.write(0, entry("a", T0 + "01Z", "epoch 1"), entry("b", T0 + "20Z", "epoch 2"))
        # Ingested during the outage with the timestamp of an entry already shown: told apart by insertId.
        logging.write(2, entry("b2", T0 + "20Z", "epoch 2, same instant"))
        logging.write(3, entry("c", T0 + "50Z", "epoch 3"))
        logging.write(5, entry("d", "2026-01-02T03:05:10Z", "epoch 4"))
        # The 2nd to 4th reads fail: quota, a server error, a connection dropped with no answer.
        logging.failures = {1: quota(), 2: UNAVAILABLE, 3: RESET}
        rc, lines, err = follow(server, tmp_path)
    assert rc == 0, err
    assert shown(lines) == [
        "INFO epoch 1",
        "INFO epoch 2",
        "INFO epoch 2, same instant",
        "INFO epoch 3",
        "INFO epoch 4",
    ]
    warnings = [line for line in lines if line.startswith("logs: ")]
    assert len(warnings) == 1 and "RESOURCE_EXHAUSTED: Quota exceeded" in warnings[0], warnings
    assert "retrying" in warnings[0] and "the job is still followed" in warnings[0]
    # Polls are 15 s apart; after failures the next read waits 5, 10, then 20 s: poll 4 makes none.
    assert [r.poll for r in logging.requests][:5] == [0, 1, 2, 3, 5]
    # The read that succeeds starts 30 s before the last entry shown: "a" and "b" come back, not shown again.
    assert logging.requests[4].body["filter"].endswith('timestamp>="2026-01-02T03:04:00.000000000Z"')
    assert "JOB_STATE_SUCCEEDED" in lines[-1]


@pytest.mark.parametrize(
    "failure",
    [
        quota(headers={"Retry-After": "40"}),
        quota(details=[{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "40s"}]),
    ],
    ids=["retry-after-header", "retry-info"],
)
def test_the_wait_the_server_asks_for_is_honoured(clock, tmp_path, failure):
    with FakeVertexServer(long_job(5)) as server:
        server.fake.logging.write(2, entry("a", T0 + "30Z", "hello"))
        server.fake.logging.failures = {1: failure}
        rc, lines, err = follow(server, tmp_path)
    assert rc == 0, err
    # Failed at poll 1 (15 s), asked for 40 s: polls 2 and 3 (30, 45 s) read nothing, poll 4 (60 s) does.
    assert [r.poll for r in server.fake.logging.requests][:3] == [0, 1, 4]
    assert shown(lines) == ["INFO hello"]


def test_a_job_that_ends_while_reads_fail_gets_its_last_entries_before_its_final_state(clock, tmp_path):
    with FakeVertexServer(long_job(3)) as server:
        server.fake.logging.write(2, entry("a", T0 + "30Z", "Killed: out of memory", severity="ERROR"))
        # From the job's last running poll on, three reads fail; the fourth, 35 s of backoff later, works.
        server.fake.logging.failures = {2: UNAVAILABLE, 3: UNAVAILABLE, 4: UNAVAILABLE}
        rc, lines, err = follow(server, tmp_path)
    assert rc == 0, err
    assert lines[-2:] == [
        "[workerpool0-0] ERROR Killed: out of memory",
        next(line for line in lines if "JOB_STATE_SUCCEEDED" in line),
    ]
    assert len([line for line in lines if line.startswith("logs: ")]) == 1


def test_reads_still_failing_a_minute_after_the_end_name_the_entries_not_shown(clock, tmp_path):
    with FakeVertexServer(long_job(3)) as server:
        server.fake.logging.write(0, entry("a", T0 + "40Z", "shown"))
        server.fake.logging.write(2, entry("b", T0 + "50Z", "never read"))
        server.fake.logging.failures = {i: UNAVAILABLE for i in range(2, 50)}
        rc, lines, err = follow(server, tmp_path)
        ended_at = clock[0]
    assert rc == 0, err
    assert shown(lines) == ["INFO shown"] and "JOB_STATE_SUCCEEDED" in lines[-1]
    retried, gave_up = [line for line in lines if line.startswith("logs: ")]
    assert "retrying" in retried
    assert (
        "the job has ended and its log entries from 2026-01-02T03:04:10.000000000Z on could not be read"
        in gave_up
    )
    assert (
        '`gcloud logging read \'resource.type="ml_job" AND resource.labels.job_id="1000" AND '
        'timestamp>="2026-01-02T03:04:10.000000000Z"\' --project=demo-project --order=asc`' in gave_up
    )
    # The end was seen at 45 s, read again after the 10 s grace, then retried for a minute, and no longer.
    assert ended_at == 45 + 10 + 60 and len(server.fake.logging.requests) == 7


@pytest.mark.parametrize(
    "status, error, words, role",
    [
        (
            403,
            {"code": 403, "message": "denied", "status": "PERMISSION_DENIED"},
            "PERMISSION_DENIED: denied",
            True,
        ),
        (
            401,
            {"code": 401, "message": "no token", "status": "UNAUTHENTICATED"},
            "Anonymous credentials cannot be refreshed",
            True,
        ),  # a 401 makes the session refresh its credentials: these refuse
        (
            400,
            {"code": 400, "message": "bad filter", "status": "INVALID_ARGUMENT"},
            "INVALID_ARGUMENT: bad",
            False,
        ),
    ],
    ids=["permission-denied", "unauthenticated-no-refresh", "bad-filter"],
)
def test_a_read_that_cannot_succeed_is_one_line_and_the_follow_goes_on(
    clock, server, tmp_path, status, error, words, role
):
    server.fake.logging.error = (status, {"error": error})
    rc, lines, err = follow(server, tmp_path)
    assert rc == 0, err
    warnings = [line for line in lines if line.startswith("logs: ")]
    assert len(warnings) == 1 and words in warnings[0] and "log streaming stopped" in warnings[0]
    assert "the job is still followed" in warnings[0] and ("roles/logging.viewer" in warnings[0]) == role
    assert len(server.fake.logging.requests) == 1  # streaming stopped at the first failed read
    assert "JOB_STATE_SUCCEEDED" in lines[-1]


@pytest.mark.parametrize(
    "code, payload, headers, transient, retry_after",
    [
        (429, {"error": {"status": "RESOURCE_EXHAUSTED", "message": "q"}}, {}, True, None),
        (500, None, {}, True, None),
        (502, None, {"Retry-After": "7"}, True, 7.0),
        (408, None, {}, True, None),
        (
            429,
            {
                "error": {
                    "details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "2.5s"}]
                }
            },
            {},
            True,
            2.5,
        ),
        (503, None, {"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}, True, 0.0),  # a date already past
        (503, None, {"Retry-After": "soon"}, True, None),  # unreadable: the reader's own backoff
        (400, {"error": {"status": "INVALID_ARGUMENT", "message": "bad filter"}}, {}, False, None),
        (403, {"error": {"status": "PERMISSION_DENIED"}}, {}, False, None),
        (404, None, {}, False, None),
    ],
)
def test_which_answers_are_worth_asking_again(code, payload, headers, transient, retry_after):
    error = log_read_error(code, "reason", payload, headers)
    assert (error.transient, error.retry_after, error.denied) == (transient, retry_after, code in (401, 403))


def test_ctrl_c_leaves_the_job_running_and_following_again_streams_from_its_start(
    server, tmp_path, monkeypatch
):
    def interrupt(seconds):
        raise KeyboardInterrupt

    server.fake.logging.write(0, entry("a", T0 + "01Z", "before Ctrl-C"))
    monkeypatch.setattr(jobs.cloud.plan, "_sleep", interrupt)
    rc, lines, err = follow(server, tmp_path)
    name = next(iter(server.fake.jobs))
    assert rc == 130 and "[workerpool0-0] INFO before Ctrl-C" in lines
    assert f"run_job.py --follow {name}" in err and "keeps running" in err
    monkeypatch.setattr(jobs.cloud.plan, "_sleep", lambda seconds: None)
    server.fake.logging.write(2, entry("b", T0 + "02Z", "after"))
    rc, out, err = run_cli(["--follow", name], factory=server.factory(tmp_path))
    assert rc == 0, err
    assert "[workerpool0-0] INFO before Ctrl-C" in out and "[workerpool0-0] INFO after" in out


def stream_of(server, out):
    """The log stream of job 1000, read through the factory's CloudLogs, outside a follow."""
    from jobs.cloud.client import CloudLogs

    logs = server.factory("unused")("demo-project", "us-central1").logs
    assert isinstance(logs, CloudLogs)
    name = "projects/demo-project/locations/us-central1/customJobs/1000"
    return LogStream(logs, "demo-project", name, study=False, out=out)


def test_only_the_window_of_insert_ids_is_kept(server):
    # 200 entries a second apart, read at once: only those within 30 s of the newest stay for dedup.
    server.fake.logging.write(
        0, *(entry(str(i), format_nanos((1767322000 + i) * 10**9), "x") for i in range(200))
    )
    out = io.StringIO()
    stream = stream_of(server, out)
    assert stream.poll() == 200 and len(stream.seen) == 31
    assert stream.poll() == 0 and out.getvalue().count("\n") == 200


def test_a_flood_inside_the_window_keeps_at_most_max_seen_ids_and_shows_each_entry_once(server, monkeypatch):
    monkeypatch.setattr(jobs.cloud.logs, "MAX_SEEN", 50)
    start = 1767322000 * 10**9
    # 200 entries 10 ms apart, all inside the 30 s window; two share the newest instant.
    flood = [entry(f"e{i}", format_nanos(start + i * 10**7), "x") for i in range(200)]
    server.fake.logging.write(0, *flood, entry("twin", flood[-1]["timestamp"], "x"))
    out = io.StringIO()
    stream = stream_of(server, out)
    assert stream.poll() == 201 and len(stream.seen) == 50
    server.fake.logging.write(0, entry("next", format_nanos(start + 200 * 10**7), "x"))
    assert stream.poll() == 1 and stream.poll() == 0 and len(stream.seen) == 50
    assert out.getvalue().count("\n") == 202


def test_a_job_cannot_write_to_the_terminal_through_its_log(server, tmp_path):
    server.fake.logging.write(0, entry("a", T0 + "01Z", "\x1b[2Jcleared\rover\u202eevil\tok"))
    rc, lines, err = follow(server, tmp_path)
    assert rc == 0, err
    assert "[workerpool0-0] INFO \\x1b[2Jcleared\\rover\\u202eevil\tok" in lines


@pytest.mark.parametrize(
    "text, nanos",
    [
        ("1970-01-01T00:00:01Z", 10**9),
        ("1970-01-01T00:00:01.5Z", 15 * 10**8),
        ("1970-01-01T00:00:01.000000007Z", 10**9 + 7),
        ("1970-01-01T01:00:01+01:00", 10**9),
        ("yesterday", None),
    ],
)
def test_timestamps_keep_nanoseconds(text, nanos):
    assert timestamp_nanos(text) == nanos
    if nanos is not None:
        assert timestamp_nanos(format_nanos(nanos)) == nanos
