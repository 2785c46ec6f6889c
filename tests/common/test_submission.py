"""The submission label of a batch prediction (common/submission.py): what it is a digest of, that it is a
valid label value, and that the Workflows expression a schedule's program computes it with gives the same
value as run_job.py's Python, for texts with the characters a request may hold."""

from __future__ import annotations

import re

import pytest

from common.submission import SUBMISSION_LABEL, canonical_text, digest, submission_label, workflows_digest
from tests.infra.workflows_interpreter import Interpreter

BODY = {"displayName": "recommender-production-batch-20260102-030405", "model": "m@production",
        "labels": {"model": "recommender"}, "outputConfig": {"gcsDestination": {"outputUriPrefix": "gs://b/o/"}}}


def test_the_label_is_of_the_body_but_its_display_name_and_itself():
    label = submission_label(BODY)
    assert re.fullmatch(r"[a-z0-9]{16}", label)
    assert submission_label({**BODY, "displayName": "another-time"}) == label
    assert submission_label({**BODY, "labels": {"model": "recommender", SUBMISSION_LABEL: label}}) == label
    assert submission_label({**BODY, "model": "m@staging"}) != label
    assert submission_label({**BODY, "labels": {"model": "other"}}) != label
    # Key order is not part of it.
    assert submission_label(dict(reversed(list(BODY.items())))) == label


@pytest.mark.parametrize("text", [
    canonical_text(BODY),
    "",
    'quotes " and \\ backslashes, a tab\t',
    "\u00e9t\u00e9 \u2603",
    "x" * 5000,
], ids=["request", "empty", "escapes", "unicode", "long"])
def test_workflows_computes_the_same_digest(text):
    program = {"main": {"steps": [
        {"init": {"assign": [{"source": text}]}},
        {"done": {"return": "${" + workflows_digest("source") + "}"}},
    ]}}
    assert Interpreter(program, now=0, env={}, connectors={}).run() == digest(text)
