"""Shared by the infra tests: the scenarios they synthesize and checkov as users run it (fixtures stay in
conftest.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
SCENARIOS_DIR = Path(__file__).resolve().parent / "scenarios"
# The roles the tests give the scenarios: a stack with every default, and one with CMEK.
BASIC = "standard"
CMEK = "cmek"
SCENARIOS = ("cmek", "minimal", "standard")
CHECKOV = Path(sys.executable).parent / "checkov"


def run_checkov(outdir: Path) -> dict:
    """checkov as users run it: `checkov -d <outdir>`, which loads the generated .checkov.yaml by itself."""
    env = {**os.environ, "BC_SKIP_MAPPING": "TRUE", "LOG_LEVEL": "ERROR"}
    result = subprocess.run(
        [str(CHECKOV), "-d", str(outdir), "--framework", "terraform_json", "--compact", "-o", "json"],
        cwd=outdir, env=env, capture_output=True, text=True, timeout=180,
    )
    assert result.returncode in (0, 1), result.stderr[-2000:]
    report = json.loads(result.stdout)
    return report[0] if isinstance(report, list) else report


def findings(records: list[dict]) -> set[tuple[str, str, str]]:
    """(stack, logical id, check id); checkov names resources `resource.<id>` or `<type>.<id>`."""
    return {(r["file_path"].split("/")[2], r["resource"].split(".", 1)[1], r["check_id"]) for r in records}
