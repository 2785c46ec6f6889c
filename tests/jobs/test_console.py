"""The console of a single run (jobs/console.py): the trainer's progress lines, recorded from real runs, as
the compact lines `--local` and a followed job print; lines that are not progress (or are hostile) are no
event."""

from __future__ import annotations

import json

import pytest

from jobs import console
from trainer.contract import PROGRESS_EVENTS, PROGRESS_MAX_CHARS, PROGRESS_TAG

# Recorded from `run_job.py jobs/*.yaml --local` replica logs (census, the recommender, image_tpu).
HEAD = "2026-11-28 05:37:07,919 INFO trainer.progress: "
RECORDED = [
    (
        HEAD + 'trainer-progress {"event":"start","model":"image_classifier","epochs":10}',
        ["trainer started: --model image_classifier, 10 epochs"],
    ),
    (
        HEAD + 'trainer-progress {"event":"stage","what":"data","detail":"train: 32561 rows from 1 file(s); '
        'eval: 16281 rows from 1 file(s)","seconds":1.3}',
        ["pre-training: data: train: 32561 rows from 1 file(s); eval: 16281 rows from 1 file(s) (1.3 s)"],
    ),
    (  # a slow step says so as it starts (no seconds yet)
        HEAD + 'trainer-progress {"event":"stage","what":"EASE weights","detail":"9724 x 9724 items: '
        'starting","seconds":null}',
        ["pre-training: EASE weights: 9724 x 9724 items: starting"],
    ),
    (
        HEAD + 'trainer-progress {"event":"stage","what":"EASE weights","detail":"9724 x 9724 items, '
        'computed","seconds":11.8}',
        ["pre-training: EASE weights: 9724 x 9724 items, computed (11.8 s)"],
    ),
    (
        HEAD + 'trainer-progress {"event":"note","text":"--backbone mobilenet_v2 is frozen at random '
        'weights"}',
        ["note: --backbone mobilenet_v2 is frozen at random weights"],
    ),
    (  # census: loss first, then the others by name; val after the bar
        HEAD + 'trainer-progress {"event":"epoch","epoch":1,"epochs":8,"seconds":10.7,"train":{"accuracy":'
        '0.8318,"auc":0.882,"loss":0.3498},"val":{"accuracy":0.8583,"auc":0.9144,"loss":0.304}}',
        ["epoch 1/8  loss 0.3498  accuracy 0.8318  auc 0.8820 | val loss 0.3040  accuracy 0.8583  auc 0.9144 "
         "(10.7 s)"],
    ),
    (  # the recommender ranks on the eval data only: its training side is the loss alone
        HEAD + 'trainer-progress {"event":"epoch","epoch":15,"epochs":15,"seconds":5.6,"train":{"loss":'
        '4.365},"val":{"loss":7.369,"ndcg_at_k":0.298,"recall_at_k":0.2958}}',
        ["epoch 15/15  loss 4.3650 | val loss 7.3690  ndcg_at_k 0.2980  recall_at_k 0.2958 (5.6 s)"],
    ),
    (
        HEAD + 'trainer-progress {"event":"result","model_dir":"gs://m/recommender/r-1/model/","eval":'
        '{"loss":7.369,"recall_at_k":0.2958,"ndcg_at_k":0.298},"baselines":{"popularity":{"ndcg_at_k":0.16,'
        '"recall_at_k":0.1582},"ease":{"ndcg_at_k":0.2935,"recall_at_k":0.2884}}}',
        [
            "  SavedModel: gs://m/recommender/r-1/model/",
            "  eval: loss 7.3690  ndcg_at_k 0.2980  recall_at_k 0.2958",
            "  baseline popularity (same eval data): ndcg_at_k 0.1600  recall_at_k 0.1582",
            "  baseline ease (same eval data): ndcg_at_k 0.2935  recall_at_k 0.2884",
        ],
    ),
    (  # Cloud Logging's textPayload of the same line (Vertex AI writes what the replica printed)
        'trainer-progress {"event":"result","model_dir":"gs://m/census/model/","eval":{"auc":0.9274},'
        '"baselines":{}}',
        ["  SavedModel: gs://m/census/model/", "  eval: auc 0.9274"],
    ),
]


@pytest.mark.parametrize("line, shown", RECORDED, ids=[f"{i}" for i in range(len(RECORDED))])
def test_a_recorded_progress_line_renders_compact(line, shown):
    event = console.parse(line)
    assert event is not None and console.render(event) == shown


NOT_PROGRESS = [
    "2026-11-28 05:32:22,838 INFO trainer: epoch 1/8 accuracy=0.8318 auc=0.8820 loss=0.3498 (10.7 s)",
    "trainer-progress",
    "trainer-progress {not json",
    'trainer-progress ["event", "epoch"]',
    'trainer-progress {"event": "launch"}',  # an event the contract does not have
    'trainer-progress {"event": "epoch", "epoch": 1}',  # fields missing
    "trainer-progress " + "[" * 100_000,  # nesting deeper than the parser goes
    'trainer-progress {"event": "note", "text": "' + "x" * PROGRESS_MAX_CHARS + '"}',  # too long to be one
]


@pytest.mark.parametrize("line", NOT_PROGRESS, ids=["human", "bare", "not-json", "list", "unknown", "missing",
                                                    "deep", "huge"])
def test_a_line_that_is_not_a_well_formed_progress_line_is_no_event(line):
    assert console.parse(line) is None


HOSTILE = [
    ({"event": "note", "text": "\x1b[2Jcleared"}, "note: \\x1b[2Jcleared"),
    ({"event": "stage", "what": "data", "detail": "x" * 5000, "seconds": "soon"}, "(5000 characters)"),
    ({"event": "epoch", "epoch": "1", "epochs": True, "seconds": float("nan"), "train": {"loss": "NaN"},
      "val": [1]}, "epoch ?/?  loss 'NaN'"),
    ({"event": "epoch", "epoch": 1, "epochs": 2, "seconds": 1, "train": {f"m{i}": i for i in range(1000)},
      "val": {}}, "epoch 1/2  m0 0  m1 1  m10 10"),
    ({"event": "result", "model_dir": None, "eval": "0.9", "baselines": {"b\x07": {"auc": 1e300}}},
     "baseline b\\x07 (same eval data): auc 1e+300"),
]


@pytest.mark.parametrize("event, part", HOSTILE, ids=["control", "long", "types", "many", "result"])
def test_a_hostile_event_renders_escaped_and_bounded(event, part):
    parsed = console.parse(PROGRESS_TAG + json.dumps(event))
    assert parsed is not None
    lines = console.render(parsed)
    assert any(part in text for text in lines), lines
    assert all(text.isprintable() and len(text) < 700 for text in lines)


def test_every_contract_event_renders():
    for name, fields in PROGRESS_EVENTS.items():
        event = {"event": name, **dict.fromkeys(fields)}
        assert console.render(event), name  # a null field still gives a line


def test_a_report_shows_the_closing_lines_of_a_metrics_file():
    metrics = {"eval": {"accuracy": 0.2, "loss": 1.6094},
               "data": {"notes": ["random weights"], "baselines": {}}}
    report = {"name": "/runs/r", "displayName": "r", "state": "SUCCEEDED",
              "startTime": "2026-01-01T00:00:00Z", "endTime": None, "duration_s": None,
              "modelDir": "/runs/r/model/", "error": "boom\nthere", "metrics": metrics}
    assert console.job_report_lines(report, "a note") == [
        "CustomJob r (/runs/r): SUCCEEDED",
        "  start 2026-01-01T00:00:00Z",
        "  SavedModel: /runs/r/model/",
        "  eval: loss 1.6094  accuracy 0.2000",
        "  note: random weights",
        "  a note",
        "Job error: boom there",
    ]


def test_what_the_trainer_writes_is_what_the_console_reads(caplog):
    """trainer.progress formats each event of the contract; jobs.console parses it back whole (the chief
    only: another replica writes none)."""
    from trainer import progress

    caplog.set_level("INFO", logger="trainer.progress")
    sent = {"event": "epoch", "epoch": 3, "epochs": 8, "seconds": 1.5, "train": {"loss": 0.25, "auc": 0.9},
            "val": {"loss": 0.3}}
    try:
        progress.configure(chief=False)
        progress.emit(**sent)
        assert caplog.records == []
        progress.configure(chief=True)
        progress.emit(**sent)
        with progress.stage("ratings", "starting") as done:
            done["detail"] = "100 read"
    finally:
        progress.configure(chief=True)
    lines = [r.getMessage() for r in caplog.records if r.name == "trainer.progress"]
    assert [console.parse(f"2026-01-01 00:00:00,000 INFO trainer.progress: {line}") for line in lines] == [
        sent,
        {"event": "stage", "what": "ratings", "detail": "starting", "seconds": None},
        {"event": "stage", "what": "ratings", "detail": "100 read", "seconds": 0.0},
    ]
    with pytest.raises(ValueError, match="takes"):
        progress.emit("epoch", epoch=1)  # a field missing is the trainer's bug, not a line the console drops
