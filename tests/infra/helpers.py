"""Shared by the infra tests: the scenarios they synthesize (fixtures stay in conftest.py; checkov runs
through infra.policy, as `make scan` runs it)."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
SCENARIOS_DIR = Path(__file__).resolve().parent / "scenarios"
# The roles the tests give the scenarios: a stack with every default, and one with CMEK.
BASIC = "standard"
CMEK = "cmek"
SCENARIOS = ("cmek", "minimal", "standard")
