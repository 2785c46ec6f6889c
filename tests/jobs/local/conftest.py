"""Fixtures of the local executor's tests: the CPU count --local believes in, and permission checks that
behave as for a normal user when the tests run as root."""

import os
import stat

import pytest

from jobs.local import capacity


@pytest.fixture
def cpus(monkeypatch):
    """``cpus(n)``: --local sees n usable CPUs (its process cap is max(4, 2 x n))."""

    def set_cpus(n: int) -> None:
        monkeypatch.setattr(capacity, "usable_cpus", lambda: n)

    return set_cpus


@pytest.fixture
def owner_permissions(monkeypatch):
    """os.access decided by the owner's mode bits, as for a non-root owner: root may write anywhere, which
    would hide a read-only --local-root. A no-op when the tests do not run as root."""
    if os.geteuid() != 0:
        return
    bits = {os.R_OK: stat.S_IRUSR, os.W_OK: stat.S_IWUSR, os.X_OK: stat.S_IXUSR}

    def access(path, mode, *args, **kwargs):
        try:
            st_mode = os.stat(path).st_mode
        except OSError:
            return False
        return all(st_mode & bit for flag, bit in bits.items() if mode & flag)

    monkeypatch.setattr(os, "access", access)
