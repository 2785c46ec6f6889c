"""Fixtures for the trainer tests (their helpers are in tests/trainer/helpers.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.trainer.helpers import CENSUS, EVAL_ROWS, TRAIN_ROWS, write_slice


@pytest.fixture(scope="session")
def census_slice(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("census")
    return {
        "train": write_slice(CENSUS / "adult.data", root / "adult.data", TRAIN_ROWS),
        "eval": write_slice(CENSUS / "adult.test", root / "adult.test", EVAL_ROWS, keep_banner=True),
    }
