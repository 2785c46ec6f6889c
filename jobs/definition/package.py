"""The trainer as Vertex AI installs it: an sdist named by the content of its sources.

The hash covers the files that go into the sdist (relative path + bytes), not the tarball, whose mtimes change
on every build; so identical code maps to the same object in the staging bucket and is uploaded once.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

PACKAGE_DIR = "trainer"
# Build metadata that shapes the sdist, beside the package sources.
BUILD_FILES = ("pyproject.toml", "setup.cfg", "setup.py", "MANIFEST.in")
_SKIP_DIRS = {"__pycache__", ".pytest_cache", ".mypy_cache"}
_SKIP_SUFFIXES = (".pyc", ".pyo", ".so")


class PackageError(RuntimeError):
    """The trainer sdist could not be built."""


def source_files(repo_root: Path) -> list[Path]:
    """Files that make up the trainer sdist, sorted, relative to the repo root."""
    files = [Path(name) for name in BUILD_FILES if (repo_root / name).is_file()]
    package = repo_root / PACKAGE_DIR
    if package.is_dir():
        for path in sorted(package.rglob("*")):
            rel = path.relative_to(repo_root)
            if (
                path.is_file()
                and not _SKIP_DIRS.intersection(rel.parts)
                and not path.name.endswith(_SKIP_SUFFIXES)
                and not any(part.endswith(".egg-info") for part in rel.parts)
            ):
                files.append(rel)
    return files


def code_hash(repo_root: Path) -> str:
    digest = hashlib.sha256()
    for rel in source_files(repo_root):
        digest.update(rel.as_posix().encode() + b"\0")
        digest.update((repo_root / rel).read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()[:16]


def sdist_filename(repo_root: Path) -> str:
    """``<name>-<version>.tar.gz`` as setuptools will name it (PEP 625), read without building."""
    text = (
        (repo_root / "pyproject.toml").read_text(encoding="utf-8")
        if (repo_root / "pyproject.toml").is_file()
        else ""
    )
    project = text.split("[project]", 1)[1] if "[project]" in text else ""
    name = re.search(r'^name\s*=\s*"([^"]+)"', project, re.M)
    version = re.search(r'^version\s*=\s*"([^"]+)"', project, re.M)
    normalized = re.sub(r"[-_.]+", "_", (name.group(1) if name else PACKAGE_DIR)).lower()
    return f"{normalized}-{version.group(1) if version else '0.0.0'}.tar.gz"


def build_sdist(repo_root: Path, out_dir: Path) -> Path:
    """Build the trainer sdist into ``out_dir`` from a copy of its sources (the checkout stays clean).

    ``--no-isolation``: the build backend comes from this environment, so no network is needed.
    """
    with tempfile.TemporaryDirectory(prefix="trainer-src-") as tmp:
        src = Path(tmp)
        for rel in source_files(repo_root):
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(repo_root / rel, src / rel)
        out_dir.mkdir(parents=True, exist_ok=True)
        result = subprocess.run(
            [sys.executable, "-m", "build", "--sdist", "--no-isolation", "--outdir", str(out_dir), str(src)],
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            tail = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["(no output)"]
            raise PackageError(f"building the trainer sdist failed: {tail[0]}")
    built = sorted(out_dir.glob("*.tar.gz"))
    if not built:
        raise PackageError(f"building the trainer sdist produced no .tar.gz in {out_dir}")
    return built[-1]
