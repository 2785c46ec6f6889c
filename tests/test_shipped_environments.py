"""README step 3 as a user does it: point infra/environments/*.yaml at your own project, and the suite stays
green. The jobs and scripts suites run on a temporary copy of the repository whose dev.yaml and prod.yaml were
rewritten with other valid values (tests/user_copy.py), so a test that leans on the shipped placeholder values
fails here. The infra suite never sees those files: it reads its own scenarios, and its conftest fails a test
that opens infra/environments/ or starts a process that would read there."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

import pytest
import yaml

from tests.user_copy import IGNORED, ROOT, SUITES, USER_COPY_ROOT, USER_COPY_RUN, SuiteRun, start_suites

ENVIRONMENT_READERS = re.compile(
    r"load_environment|resolve_outputs\(|load_outputs\(|list_environments|environments/|planned_outputs\("
)


@pytest.fixture(scope="module")
def suite_run(request) -> SuiteRun:
    """Started by the root conftest at collection time (under pytest-xdist by the controller, in the folder
    its workers find in USER_COPY_ROOT); started here when neither did."""
    run = request.config.stash.get(USER_COPY_RUN, None)
    if run is None and os.environ.get(USER_COPY_ROOT):
        run = SuiteRun(Path(os.environ[USER_COPY_ROOT]))
    if run is None or not run.started():
        root = Path(tempfile.mkdtemp(prefix="user-copy-"))
        request.addfinalizer(lambda: shutil.rmtree(root, ignore_errors=True))
        run = start_suites(root)
        request.addfinalizer(run.stop)
    return run


def test_the_rewritten_environments_are_other_valid_values(suite_run, monkeypatch):
    from infra.config import ENVIRONMENTS_DIR_VAR, load_environment

    monkeypatch.setenv(ENVIRONMENTS_DIR_VAR, str(suite_run.copy / "infra" / "environments"))
    for env in ("dev", "prod"):
        shipped = yaml.safe_load((ROOT / "infra" / "environments" / f"{env}.yaml").read_text())
        cfg = load_environment(env)  # valid: the config loader accepts them
        assert (cfg.project_id, cfg.region, cfg.name_prefix) == (
            f"ada-{env}-4711",
            "europe-west4",
            f"ada-{env}",
        )
        assert cfg.project_id != shipped["project_id"] and cfg.region != shipped["region"]


def test_jobs_and_scripts_suites_pass_on_a_users_environments(suite_run):
    returncode, output = suite_run.wait()
    assert returncode == 0, output[-4000:]
    assert re.search(r"\d+ passed", output) and " failed" not in output


def test_the_tests_the_copy_leaves_out_never_read_an_environment():
    training = [
        p for d in SUITES for p in (ROOT / d).rglob("test_*.py") if "pytest.mark.training" in p.read_text()
    ]
    ignored = [p for d in IGNORED for p in ([ROOT / d] if d.endswith(".py") else (ROOT / d).rglob("*.py"))]
    assert training and ignored, "nothing left out: keep tests/user_copy.py in step with the suites"
    assert "tests/infra" not in SUITES and "reads_no_shipped_environment" in (
        ROOT / "tests" / "infra" / "conftest.py").read_text(), "tests/infra's guard is what lets it out"
    for path in training + ignored:
        if path.name == "test_run_job_local.py":
            # It runs the README's --local commands with the default environment and reads the outputs back
            # through resolve_outputs: whatever the values, the same ones on both sides.
            continue
        assert not ENVIRONMENT_READERS.search(path.read_text()), (
            f"{path.relative_to(ROOT)} reads an environment"
        )
