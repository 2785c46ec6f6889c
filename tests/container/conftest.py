"""The container tier (marker ``container``): tests that build and run the trainer image with this machine's
Docker or Podman. The cpu image is built once per content hash (its tag), shared by every test and reused by
later runs; where no engine answers, the whole tier is skipped with one line saying why."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from jobs.local.engine import BuildError, Engine, EngineError, find_engine
from jobs.local.trainer_image import LocalImage, ensure_image
from tests.container.background import started_build, wait_for

REPO_ROOT = Path(__file__).resolve().parents[2]


def pytest_collection_modifyitems(config, items):
    """Every test under tests/container carries the ``container`` marker (`-m "not container"` leaves them
    out)."""
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.path).parents:
            item.add_marker(pytest.mark.container)


@pytest.fixture(scope="session")
def engine() -> Engine:
    try:
        return find_engine()
    except EngineError as exc:
        pytest.skip(f"container tier: {exc}")


@pytest.fixture(scope="session")
def cpu_image(engine: Engine, request) -> LocalImage:
    """This checkout's cpu image, localhost/trainer:cpu-<hash>: built in the background from collection on
    (tests/container/background.py) and waited for, else built here unless its tag exists."""
    build = started_build(request.config)
    if build is not None:
        wait_for(build)
    log = io.StringIO()
    try:
        return ensure_image(engine, REPO_ROOT, "cpu", log)
    except BuildError as exc:
        tail = "\n".join(log.getvalue().splitlines()[-30:])
        pytest.fail(f"{exc}\n{tail}", pytrace=False)
    except EngineError as exc:
        pytest.skip(f"container tier: {exc}")
