"""A copy of the repository as a user has it after README step 3 (infra/environments/*.yaml pointed at their
own project), and the infra and jobs suites run on it: see tests/test_shipped_environments.py.

The run takes over a minute of mostly single-threaded work (synthesis, checkov, pytest's own start-up), so the
root conftest.py starts it in the background as soon as the test that needs it is collected, and the test
only waits for it: it overlaps with the rest of the suite instead of adding to it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
# The suites that could read the environment files, less the tests that train models (marker `training`,
# minutes each) and the local executor's tests, which build their jobs from fixed outputs: two minutes of CPU
# that no environment value can change. tests/test_shipped_environments.py checks that none of those left out
# names an environment.
SUITES = ("tests/infra", "tests/jobs", "tests/scripts")
IGNORED = ("tests/jobs/local",)
MARKERS = "not training"
TIMEOUT_S = 900


def user_values(env: str, text: str) -> str:
    """The file as a user who owns project `ada-<env>-4711` in europe-west4 would have edited it."""
    data = yaml.safe_load(text)
    data.update(
        project_id=f"ada-{env}-4711",
        project_number=str(900000000000 + len(env)),
        region="europe-west4",
        name_prefix=f"ada-{env}",
        state_bucket=f"ada-{env}-terraform-state",
        github={
            **data["github"],
            "owner": "ada-lovelace",
            "repository": "ml-platform",
            "repository_id": 4242,
        },
        job_submitters=["group:data-science@ada.example", "user:ada@ada.example"],
        labels={"team": "analytics"},
    )
    if data.get("kms_key"):
        data["kms_key"] = f"projects/ada-kms/locations/europe-west4/keyRings/ml/cryptoKeys/{env}"
    return yaml.safe_dump(data, sort_keys=False)


def make_user_copy(copy: Path) -> Path:
    """What a clone holds (tracked files and new ones not yet committed, never build output or caches), the
    environments rewritten; the installed .venv and node_modules are linked, not copied."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout
    for rel in filter(None, listed.decode().split("\0")):
        if (ROOT / rel).is_file():
            (copy / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, copy / rel)
    for shared in (".venv", "node_modules"):
        if (ROOT / shared).exists():
            (copy / shared).symlink_to(ROOT / shared)
    for env in ("dev", "prod"):
        path = copy / "infra" / "environments" / f"{env}.yaml"
        path.write_text(user_values(env, path.read_text()))
    return copy


@dataclass
class SuiteRun:
    copy: Path
    process: subprocess.Popen
    log: Path

    def wait(self) -> tuple[int, str]:
        try:
            returncode = self.process.wait(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            returncode = self.process.wait()
        return returncode, self.log.read_text(errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def start_suites(copy: Path) -> SuiteRun:
    from infra.config import ENVIRONMENTS_DIR_VAR

    make_user_copy(copy)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_") and k != ENVIRONMENTS_DIR_VAR}
    env["PYTHONPATH"] = str(copy)
    log = copy.parent / "user-copy-pytest.log"
    with open(log, "w") as out:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pytest",
                *SUITES,
                *(f"--ignore={p}" for p in IGNORED),
                "-m",
                MARKERS,
                "-q",
                "-p",
                "no:cacheprovider",
            ],
            cwd=copy,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return SuiteRun(copy, process, log)


# Where the root conftest keeps the run it started, for the test to wait on.
USER_COPY_RUN = pytest.StashKey[SuiteRun]()
