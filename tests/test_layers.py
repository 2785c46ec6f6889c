"""The top-level packages' layers: scripts/ -> jobs/ -> infra/ and trainer/'s contracts -> common/. Each
imports only the packages its row names (at module level or inside functions); jobs/'s own layers are
tests/jobs/test_layers.py's."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Each top-level package and the repo packages (and TensorFlow) it may import, itself included.
ALLOWED = {
    # Below infra/ and jobs/: what both use (the bounded reader, Cloud Storage's names).
    "common": {"common"},
    # The trainer ships alone (its sdist and image): nothing of the rest of the repo.
    "trainer": {"trainer", "tensorflow"},
    "infra": {"common", "infra"},
    "jobs": {"common", "infra", "trainer", "jobs"},
    "scripts": {"common", "infra", "trainer", "jobs", "scripts", "tensorflow"},
}
WATCHED = set(ALLOWED) | {"tensorflow", "tests"}


def imported_tops(path: Path) -> set[str]:
    """The watched top-level packages ``path`` imports (relative imports stay inside its own package)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module.split(".")[0])
    return found & WATCHED


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_each_package_imports_only_the_layers_below_it(package):
    crossings = {
        f"{path.relative_to(ROOT)}: {top}"
        for path in sorted((ROOT / package).rglob("*.py"))
        for top in imported_tops(path) - ALLOWED[package]
    }
    assert crossings == set()
