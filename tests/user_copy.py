"""A copy of the repository as a user has it after README step 3 (infra/environments/*.yaml pointed at their
own project), and the jobs and scripts suites run on it: see tests/test_shipped_environments.py.

The run takes over a minute of mostly single-threaded work (synthesis, checkov, pytest's own start-up), so the
root conftest.py starts it in the background as soon as the test that needs it is collected, and the test
only waits for it: it overlaps with the rest of the suite instead of adding to it. Under pytest-xdist it is
started once, by the controller (every worker collects every test: each used to start a run of its own, and
only one was ever waited for), and the worker that runs the test waits for its status file.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
# The suites that could read the environment files, less the tests that train models (marker `training`,
# minutes each) and the local executor's tests, which build their jobs from fixed outputs: two minutes of CPU
# that no environment value can change. tests/test_shipped_environments.py checks that none of those left out
# names an environment. tests/infra is left out too (30 s of CPU): every infra test reads
# tests/infra/scenarios, and its conftest fails one that opens infra/environments/ or starts a process that
# would read there. So is the MNIST generator's test (13 s of CPU, TensorFlow reading the shards back): it
# reads data/mnist and scripts/generators alone.
SUITES = ("tests/jobs", "tests/scripts")
IGNORED = ("tests/jobs/local", "tests/scripts/test_make_mnist_tfrecords.py")
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


# Where pytest-xdist's controller starts the run (tests/conftest.py), for the worker that runs the test.
USER_COPY_ROOT = "TESTS_USER_COPY_ROOT"
# Runs the suites' command and writes its exit status to a file (atomically): any process can wait for it.
_RECORD_STATUS = (
    "import os, subprocess, sys\n"
    "status = subprocess.call(sys.argv[2:])\n"
    "with open(sys.argv[1] + '.tmp', 'w') as f:\n"
    "    f.write(str(status))\n"
    "os.replace(sys.argv[1] + '.tmp', sys.argv[1])\n"
)


@dataclass
class SuiteRun:
    """The suites' run on the copy in root/repo: its log, and its exit status once it is done (written by the
    run itself, so the process that waits need not be the one that started it); ``process`` in the one that
    started it, which alone stops it."""

    root: Path
    process: subprocess.Popen | None = None

    @property
    def copy(self) -> Path:
        return self.root / "repo"

    @property
    def log(self) -> Path:
        return self.root / "user-copy-pytest.log"

    @property
    def status(self) -> Path:
        return self.root / "returncode"

    def started(self) -> bool:
        return self.log.exists()

    def wait(self) -> tuple[int, str]:
        deadline = time.monotonic() + TIMEOUT_S
        while not self.status.exists() and time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                break  # ended without recording a status
            time.sleep(0.5)
        if self.status.exists():
            returncode = int(self.status.read_text())
        else:
            self.stop()
            returncode = -1
        return returncode, self.log.read_text(errors="replace")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)  # its own session: the suites' children too
            self.process.wait()


def start_suites(root: Path) -> SuiteRun:
    from infra.config import ENVIRONMENTS_DIR_VAR

    run = SuiteRun(root)
    make_user_copy(run.copy)
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("PYTEST_") and k not in (ENVIRONMENTS_DIR_VAR, USER_COPY_ROOT)
    }
    env["PYTHONPATH"] = str(run.copy)
    with open(run.log, "w") as out:
        run.process = subprocess.Popen(
            [
                sys.executable,
                "-c",
                _RECORD_STATUS,
                run.status,
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
            cwd=run.copy,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return run


# Where the process that started the run (the only pytest process, or pytest-xdist's controller) keeps it.
USER_COPY_RUN = pytest.StashKey[SuiteRun]()
