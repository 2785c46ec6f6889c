"""The top-level packages' layers: scripts/ -> jobs/ -> infra/, serving/ and trainer/'s contracts -> common/.
Each imports only the packages its row names (at module level or inside functions); jobs/'s own layers are
tests/jobs/test_layers.py's."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.import_graph import imports, module_name

ROOT = Path(__file__).resolve().parents[1]
# Each top-level package and the repo packages (and TensorFlow) it may import, itself included.
ALLOWED = {
    # Below infra/ and jobs/: what both use (the bounded reader, Cloud Storage's names).
    "common": {"common"},
    # The trainer ships alone (its sdist and image): nothing of the rest of the repo.
    "trainer": {"trainer", "tensorflow"},
    "infra": {"common", "infra"},
    # The prediction server serves the trainer's exports with its data contracts and task helpers.
    "serving": {"serving", "trainer", "tensorflow"},
    "jobs": {"common", "infra", "trainer", "serving", "jobs"},
    "scripts": {"common", "infra", "trainer", "serving", "jobs", "scripts", "tensorflow"},
}
# What jobs/ may take from serving/: the modules that import neither TensorFlow nor uvicorn when imported
# (run_job.py serve checks MODEL_DIR and --port with them before its server starts).
SERVING_LIGHT = {"serving", "serving.cli", "serving.model", "serving.requests"}
WATCHED = set(ALLOWED) | {"tensorflow", "tests"}


def imported(path: Path) -> set[str]:
    """The modules of watched top-level packages ``path`` imports (relative ones stay in its own package)."""
    found = {module for module, _ in imports(module_name(path, ROOT), path)}
    return {name for name in found if name.split(".")[0] in WATCHED}


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_each_package_imports_only_the_layers_below_it(package):
    crossings = {
        f"{path.relative_to(ROOT)}: {top}"
        for path in sorted((ROOT / package).rglob("*.py"))
        for top in {name.split(".")[0] for name in imported(path)} - ALLOWED[package]
    }
    assert crossings == set()


def test_jobs_takes_only_the_light_serving_modules():
    taken = {name for path in (ROOT / "jobs").rglob("*.py") for name in imported(path)
             if name.split(".")[0] == "serving"}
    assert taken <= SERVING_LIGHT
    code = ("import sys, " + ", ".join(sorted(SERVING_LIGHT)) + "; "
            "print(sorted(m for m in ('tensorflow', 'numpy', 'uvicorn', 'httptools') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
