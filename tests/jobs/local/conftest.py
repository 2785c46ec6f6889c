"""Fixtures of the local executor's tests: the CPU count --local believes in (owner_permissions, shared with
the report tests, is in tests/jobs/conftest.py)."""

import pytest

from jobs.local import capacity


@pytest.fixture
def cpus(monkeypatch):
    """``cpus(n)``: --local sees n usable CPUs (its process cap is max(4, 2 x n))."""

    def set_cpus(n: int) -> None:
        monkeypatch.setattr(capacity, "usable_cpus", lambda: n)

    return set_cpus
