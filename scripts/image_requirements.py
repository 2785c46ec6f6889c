#!/usr/bin/env python3
"""Generate the trainer image's pinned, hashed requirements files (docker/requirements-*.txt).

Usage (from the repo root, with .venv/bin/python or after `. .venv/bin/activate`: the locked distributions):
  python scripts/image_requirements.py            # regenerate the files (reads PyPI for what the lock lacks)
  python scripts/image_requirements.py --check    # offline: exit 1 if a generated file is out of date
  python scripts/image_requirements.py --upgrade  # also re-pick the packages the lock does not pin

Run it after every change to Pipfile.lock (the test suite runs --check). The Dockerfile installs each file
with `pip install --no-deps --require-hashes --no-build-isolation -r`, so a file holds the whole runtime
closure of the trainer: its imports (tensorflow, keras, numpy) and the [project] dependencies of
pyproject.toml (tensorboard, cloudml-hypertune), with every requirement below them, markers evaluated for
the image (CPython 3.11 on Linux x86_64). Never a dev or tooling package: only what that closure reaches.

  requirements-build.txt  setuptools, installed first: cloudml-hypertune is an sdist, built without build
                          isolation so that no unpinned setuptools is downloaded while building.
  requirements-cpu.txt    tensorflow and its closure, versions and hashes exactly as in Pipfile.lock, plus
                          the prediction server's uvicorn and httptools (the cpu image serves models).
  requirements-gpu.txt    the same plus tensorflow's `and-cuda` extra (the nvidia-* CUDA wheels).
  requirements-tpu.txt    tensorflow-tpu (the newest on PyPI) and the libtpu its metadata requires; every
                          other pin as in Pipfile.lock wherever tensorflow-tpu's requirements allow it.

How a version is chosen: the Pipfile.lock version when it satisfies every requirement on the package (its
metadata then comes from the installed distribution, which must be that version, and its hashes from the
lock); otherwise a release from PyPI, with the sha256 of every file pip could install on the image.
Accelerator runtimes (nvidia-*, libtpu) take the lowest version TensorFlow's metadata allows: the CUDA,
cuDNN or libtpu release TensorFlow names as its build's. Anything else the lock cannot serve takes the
newest allowed release. What was read from PyPI (Requires-Dist, hashes) is kept in
docker/pypi-metadata.json, so regenerating is stable and --check needs no network; --upgrade ignores it.

Exit status: 0 written, or up to date; 1 --check found a stale file (named on stderr); 2 bad input (one
line on stderr: file: field: problem) or PyPI could not be read.
"""

from __future__ import annotations

import argparse
import difflib
import email.parser
import hashlib
import importlib.metadata
import json
import sys
import tomllib
import urllib.error
import urllib.request
import zipfile
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from packaging.markers import Marker
from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.tags import Tag, compatible_tags, cpython_tags
from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version

ROOT = Path(__file__).resolve().parent.parent
LOCK = "Pipfile.lock"
PYPROJECT = "pyproject.toml"
OUT_DIR = "docker"
CACHE = f"{OUT_DIR}/pypi-metadata.json"

# The image's interpreter and C library: keep in step with the Dockerfile's FROM (a test compares them).
BASE_IMAGE = "python:3.11.15-slim-trixie"
PYTHON_VERSION = (3, 11, 15)
GLIBC = (2, 41)  # Debian trixie
MARKER_ENV = {
    "implementation_name": "cpython",
    "implementation_version": ".".join(map(str, PYTHON_VERSION)),
    "os_name": "posix",
    "platform_machine": "x86_64",
    "platform_python_implementation": "CPython",
    "platform_release": "",
    "platform_system": "Linux",
    "platform_version": "",
    "python_full_version": ".".join(map(str, PYTHON_VERSION)),
    "python_version": ".".join(map(str, PYTHON_VERSION[:2])),
    "sys_platform": "linux",
}
_PLATFORMS = [f"manylinux_{GLIBC[0]}_{minor}_x86_64" for minor in range(GLIBC[1], 4, -1)] + [
    "manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64", "linux_x86_64"
]
# pip's preference order for wheels on the image (first = most specific).
TARGET_TAGS: tuple[Tag, ...] = (
    *cpython_tags(PYTHON_VERSION[:2], abis=["cp311", "abi3", "none"], platforms=_PLATFORMS),
    *compatible_tags(PYTHON_VERSION[:2], "cp311", _PLATFORMS),
)
_TAG_RANK = {tag: rank for rank, tag in enumerate(TARGET_TAGS)}

# Modules the trainer imports directly whose distributions are not [project] dependencies (TensorFlow is
# deliberately left out of pyproject.toml: Vertex's prebuilt containers supply it).
TRAINER_IMPORTS = ("tensorflow", "keras", "numpy")
# What the prediction server (serving/, `python -m serving`) imports beside the trainer's: the cpu image
# only, the one a Model Registry entry runs.
SERVING_IMPORTS = ("uvicorn", "httptools")
SERVING_FILES = ("cpu",)
# file stem -> (what replaces the `tensorflow` root, one line on what the file is)
FILES = {
    "build": (None, "the Dockerfile's first install: setuptools, to build the cloudml-hypertune sdist"),
    "cpu": ("tensorflow", "the cpu image target"),
    "gpu": ("tensorflow[and-cuda]", "the gpu image target: tensorflow with its and-cuda extra"),
    "tpu": ("tensorflow-tpu", "the tpu image target: tensorflow-tpu with the libtpu it requires"),
}
BUILD_ROOTS = ("setuptools",)
PIP_INSTALL = "pip install --no-cache-dir --no-deps --require-hashes --no-build-isolation -r"
PYPI_SIMPLE = "https://pypi.org/simple/{name}/"
TIMEOUT_S = 60

EXIT_STALE = 1
EXIT_BAD_INPUT = 2


class InputError(Exception):
    """Bad input: printed as one line `file: field: problem`."""

    def __init__(self, file: str, field_: str, problem: str) -> None:
        super().__init__(f"{file}: {field_}: {problem}")


class Unresolved(Exception):
    """--check cannot pick a version offline: the cache lacks it, so the files are out of date."""


def prefers_lowest(name: str) -> bool:
    """Accelerator runtimes take TensorFlow's lower bound: the release its build names (CUDA 12.5 and cuDNN
    9.3 for TF 2.21's and-cuda extra; tensorflow-tpu 2.20's setup.py appends `libtpu~=0.0.14`). pip's newest
    pick would be a libtpu a year newer than TF 2.20, or CUDA libraries TensorFlow was not built with."""
    return name == "libtpu" or name.startswith("nvidia-")


@dataclass(frozen=True)
class Dist:
    name: str
    version: str
    requires: tuple[str, ...]
    hashes: tuple[str, ...]
    from_lock: bool


@dataclass
class Pin:
    dist: Dist
    via: set[str] = field(default_factory=set)  # "name[extras]" of what requires it; "trainer" for roots
    note: str = ""  # why it is not the lock's version


# --- inputs ----------------------------------------------------------------------------------------------


def load_lock(root: Path) -> dict[str, tuple[str, tuple[str, ...]]]:
    """canonical name -> (version, sha256 hashes) of the lock's runtime ([packages], "default") section."""
    try:
        data = json.loads((root / LOCK).read_text())
    except OSError as exc:
        raise InputError(LOCK, "(file)", f"cannot read: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise InputError(LOCK, f"line {exc.lineno}", f"not JSON: {exc.msg}") from None
    default = data.get("default") if isinstance(data, dict) else None
    if not isinstance(default, dict):
        raise InputError(LOCK, "default", "missing: the [packages] section of the lock")
    lock = {}
    for name, entry in default.items():
        version = entry.get("version", "") if isinstance(entry, dict) else ""
        if not (isinstance(version, str) and version.startswith("==")):
            raise InputError(LOCK, f"default.{name}.version", f"{version!r} is not an exact ==pin")
        hashes = entry.get("hashes")
        if not (isinstance(hashes, list) and hashes and all(_is_sha256(h) for h in hashes)):
            raise InputError(LOCK, f"default.{name}.hashes", "missing or not sha256:<64 hex digits> strings")
        lock[canonicalize_name(name)] = (version[2:], tuple(sorted(hashes)))
    return lock


def _is_sha256(value: object) -> bool:
    return (isinstance(value, str) and value.startswith("sha256:") and len(value) == 71
            and all(c in "0123456789abcdef" for c in value[7:]))


def trainer_roots(root: Path) -> list[Requirement]:
    """What the trainer needs at run time: its direct imports plus its [project] dependencies."""
    try:
        project = tomllib.loads((root / PYPROJECT).read_text()).get("project", {})
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise InputError(PYPROJECT, "(file)", f"cannot read: {exc}") from None
    roots = [Requirement(name) for name in TRAINER_IMPORTS]
    for number, text in enumerate(project.get("dependencies", [])):
        try:
            roots.append(Requirement(text))
        except InvalidRequirement as exc:
            raise InputError(PYPROJECT, f"project.dependencies[{number}]", str(exc)) from None
    return roots


def installed_requires(name: str, version: str) -> tuple[str, ...]:
    try:
        dist = importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        raise InputError(LOCK, f"default.{name}", "locked but not installed in this interpreter: run it with "
                         ".venv/bin/python after `make test` (or `pipenv sync --dev`)") from None
    if Version(dist.version) != Version(version):
        raise InputError(LOCK, f"default.{name}.version",
                         f"locks =={version} but {dist.version} is installed: run `pipenv sync`")
    return tuple(dist.requires or ())


# --- PyPI (only when generating) -------------------------------------------------------------------------


def _get(url: str, headers: dict[str, str] | None = None) -> bytes:
    request = urllib.request.Request(url, headers={"User-Agent": "image_requirements.py", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            return response.read()
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        raise InputError(url, "(download)", f"cannot read PyPI: {exc}") from None


class _RemoteFile:
    """A read-only, seekable view of a URL through HTTP range requests: zipfile reads a wheel's METADATA
    without downloading the wheel (hundreds of MB for tensorflow-tpu or the CUDA libraries)."""

    CHUNK = 1 << 16

    def __init__(self, url: str, size: int) -> None:
        self.url, self.size, self.pos = url, size, 0
        self._start, self._data = 0, b""

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = 0) -> int:
        self.pos = {0: offset, 1: self.pos + offset, 2: self.size + offset}[whence]
        return self.pos

    def read(self, n: int = -1) -> bytes:
        end = self.size if n is None or n < 0 else min(self.size, self.pos + n)
        if not (self._start <= self.pos and end <= self._start + len(self._data)):
            start = max(0, min(self.pos, end - self.CHUNK))
            stop = min(self.size, max(end, start + self.CHUNK))
            self._data = _get(self.url, {"Range": f"bytes={start}-{stop - 1}"})
            if len(self._data) != stop - start:  # a server that ignores Range sends the whole file
                raise InputError(self.url, "(download)", "the server does not answer HTTP range requests")
            self._start = start
        chunk = self._data[self.pos - self._start:end - self._start]
        self.pos += len(chunk)
        return chunk


@dataclass(frozen=True)
class Release:
    files: tuple[dict, ...]  # the simple-API file entries pip could install on the image


class PyPI:
    def __init__(self) -> None:
        self._releases: dict[str, dict[str, Release]] = {}

    def releases(self, name: str) -> dict[str, Release]:
        if name not in self._releases:
            body = _get(PYPI_SIMPLE.format(name=name), {"Accept": "application/vnd.pypi.simple.v1+json"})
            by_version: dict[str, list[dict]] = defaultdict(list)
            for entry in json.loads(body).get("files", []):
                version = _installable_version(entry)
                if version is not None:
                    by_version[version].append(entry)
            self._releases[name] = {v: Release(tuple(files)) for v, files in by_version.items()}
        return self._releases[name]

    def metadata(self, name: str, version: str) -> dict:
        """A cache entry: the Requires-Dist of the wheel pip would pick, the hashes of all usable files."""
        files = self.releases(name)[version].files
        wheels = [f for f in files if f["filename"].endswith(".whl")]
        if not wheels:
            raise InputError(PYPI_SIMPLE.format(name=name), version,
                             "no wheel for CPython 3.11 on Linux x86_64 (an sdist's requirements cannot be "
                             "read without building it): add the package to the Pipfile")
        best = min(wheels, key=lambda f: min(_TAG_RANK[t] for t in _wheel_tags(f["filename"])))
        if best.get("core-metadata") or best.get("data-dist-info-metadata"):
            text = _get(best["url"] + ".metadata").decode("utf-8")
        else:
            size = int(best["size"])
            with zipfile.ZipFile(_RemoteFile(best["url"], size)) as wheel:  # type: ignore[arg-type]
                member = next(n for n in wheel.namelist() if n.count("/") == 1
                              and n.endswith(".dist-info/METADATA"))
                text = wheel.read(member).decode("utf-8")
        message = email.parser.Parser().parsestr(text)
        return {
            "requires_dist": message.get_all("Requires-Dist") or [],
            "metadata_from": best["filename"],
            "hashes": sorted(f"sha256:{f['hashes']['sha256']}" for f in files),
        }


def _wheel_tags(filename: str) -> frozenset[Tag]:
    return parse_wheel_filename(filename)[3]


def _installable_version(entry: dict) -> str | None:
    """The file's version when pip could install it on the image (not yanked, Python and platform match)."""
    filename = entry.get("filename", "")
    if entry.get("yanked") or "sha256" not in entry.get("hashes", {}):
        return None
    requires_python = entry.get("requires-python")
    try:
        if requires_python and not SpecifierSet(requires_python).contains(MARKER_ENV["python_full_version"]):
            return None
        if filename.endswith(".whl"):
            _, version, _, tags = parse_wheel_filename(filename)
            return str(version) if tags & _TAG_RANK.keys() else None
        if filename.endswith((".tar.gz", ".zip")):
            return str(parse_sdist_filename(filename)[1])
    except (InvalidWheelFilename, InvalidSdistFilename, InvalidSpecifier, InvalidVersion):
        return None
    return None


# --- resolution ------------------------------------------------------------------------------------------


class Sources:
    """Where a version comes from: Pipfile.lock first, then the PyPI cache, then PyPI itself (not offline)."""

    def __init__(self, lock, cache: dict, *, online: bool, upgrade: bool) -> None:
        self.lock, self.cache, self.online, self.upgrade = lock, cache, online, upgrade
        self.pypi = PyPI() if online else None
        self.used: dict[str, dict[str, dict]] = defaultdict(dict)  # the cache entries this run relied on

    def choose(self, name: str, spec: SpecifierSet, wanted: Callable[[str | None], str]) -> tuple[Dist, str]:
        """A Dist satisfying ``spec`` and why it is not the lock's version ("" when it is).

        ``wanted(version)`` names the requirements that exclude ``version`` (None: all of them)."""
        note = ""
        if name in self.lock:
            version, hashes = self.lock[name]
            if spec.contains(version, prereleases=True):
                return Dist(name, version, installed_requires(name, version), hashes, True), ""
            note = f"Pipfile.lock's {version} is excluded by {wanted(version)}"
        pick = max if not prefers_lowest(name) else min
        cached = [v for v in self.cache.get(name, {}) if spec.contains(v, prereleases=True)]
        if cached and not (self.upgrade and self.online):
            version = pick(cached, key=Version)
            entry = self.cache[name][version]
        elif self.online:
            candidates = list(spec.filter(self.pypi.releases(name)))
            if not candidates:
                raise InputError(PYPI_SIMPLE.format(name=name), str(spec) or "(any)",
                                 f"no release for CPython 3.11 on Linux x86_64 satisfies {wanted(None)}")
            version = pick(candidates, key=Version)
            print(f"image_requirements.py: reading {name} {version} from PyPI", file=sys.stderr)
            entry = self.pypi.metadata(name, version)
        else:
            raise Unresolved(f"{name}: no version satisfying {wanted(None)} in {CACHE}")
        self.used[name][version] = entry
        return Dist(name, version, tuple(entry["requires_dist"]), tuple(entry["hashes"]), False), note


def _marker_ok(marker: Marker | None, extras: set[str]) -> bool:
    return marker is None or any(marker.evaluate({**MARKER_ENV, "extra": e}) for e in ({""} | extras))


def _excluding(wants: list[tuple[Requirement, str]]) -> Callable[[str | None], str]:
    def wanted(version: str | None) -> str:
        excluding = {f"{parent}: {req}" for req, parent in wants
                     if version is None or not req.specifier.contains(version, prereleases=True)}
        return ", ".join(sorted(excluding))
    return wanted


def resolve(roots: list[Requirement], sources: Sources, root_label: str = "trainer") -> dict[str, Pin]:
    """Pins for the closure of ``roots``: walk the graph, re-pick what it rules out, until nothing changes."""
    pins: dict[str, Pin] = {}
    for _ in range(50):
        wants: dict[str, list[tuple[Requirement, str]]] = defaultdict(list)
        extras: dict[str, set[str]] = defaultdict(set)
        expanded: dict[str, frozenset[str]] = {}
        queue = [(r, root_label, set()) for r in roots]
        while queue:
            req, parent, parent_extras = queue.pop(0)
            if not _marker_ok(req.marker, parent_extras):
                continue
            name = canonicalize_name(req.name)
            wants[name].append((req, parent))
            extras[name] |= req.extras
            if name in pins and expanded.get(name) != frozenset(extras[name]):
                expanded[name] = frozenset(extras[name])
                label = name + (f"[{','.join(sorted(extras[name]))}]" if extras[name] else "")
                queue.extend((Requirement(r), label, set(extras[name])) for r in pins[name].dist.requires)
        changed = False
        for name in sorted(wants):
            spec = SpecifierSet()
            for req, _ in wants[name]:
                spec &= req.specifier
            if name not in pins or not spec.contains(pins[name].dist.version, prereleases=True):
                dist, note = sources.choose(name, spec, _excluding(wants[name]))
                pins[name] = Pin(dist, note=note)
                changed = True
            pins[name].via = {parent for _, parent in wants[name]}
        for name in set(pins) - set(wants):
            del pins[name]
            changed = True
        if not changed:
            return dict(sorted(pins.items()))
    raise InputError(LOCK, "(resolution)", "the requirements did not settle on one set of versions")


# --- output ----------------------------------------------------------------------------------------------


def render(stem: str, pins: dict[str, Pin]) -> str:
    what = FILES[stem][1]
    versions = ", ".join(f"{n} {pins[n].dist.version}" for n in ("tensorflow", "tensorflow-tpu", "keras",
                                                                   "libtpu") if n in pins)
    lines = [
        "# GENERATED by scripts/image_requirements.py from Pipfile.lock (and docker/pypi-metadata.json for",
        "# what the lock lacks): do not edit; re-run the script after changing the lock.",
        f"# For {what}{f' ({versions})' if versions else ''};",
        f"# CPython {MARKER_ENV['python_full_version']} on Linux x86_64 ({BASE_IMAGE}).",
        f"# Installed with: {PIP_INSTALL} docker/requirements-{stem}.txt",
    ]
    for name, pin in pins.items():
        lines.append(f"{name}=={pin.dist.version} \\")
        lines.extend(f"    --hash={h} \\" for h in pin.dist.hashes)
        lines[-1] = lines[-1][:-2]
        source = "" if pin.dist.from_lock else f"; from PyPI: {pin.note or 'not in Pipfile.lock'}"
        lines.append(f"    # via {', '.join(sorted(pin.via))}{source}")
    return "\n".join(lines) + "\n"


def generate(root: Path, *, online: bool, upgrade: bool = False) -> dict[str, str]:
    """relative path -> content of every generated file."""
    lock = load_lock(root)
    cache = load_cache(root)
    sources = Sources(lock, cache, online=online, upgrade=upgrade)
    trainer = trainer_roots(root)
    outputs = {}
    for stem, (tensorflow, _) in FILES.items():
        if tensorflow is None:
            pins = resolve([Requirement(n) for n in BUILD_ROOTS], sources, "the Dockerfile (sdist builds)")
        else:
            roots = trainer + [Requirement(n) for n in SERVING_IMPORTS] * (stem in SERVING_FILES)
            pins = resolve([Requirement(tensorflow) if canonicalize_name(r.name) == "tensorflow" else r
                            for r in roots], sources)
        outputs[f"{OUT_DIR}/requirements-{stem}.txt"] = render(stem, pins)
    outputs[CACHE] = render_cache(sources.used)
    return outputs


def load_cache(root: Path) -> dict[str, dict[str, dict]]:
    path = root / CACHE
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise InputError(CACHE, "(file)", f"cannot read: {exc}") from None
    packages = data.get("packages") if isinstance(data, dict) else None
    if not isinstance(packages, dict):
        raise InputError(CACHE, "packages", "missing: an object name -> version -> entry")
    for name, versions in packages.items():
        if not isinstance(versions, dict):
            raise InputError(CACHE, f"packages.{name}", "not an object version -> entry")
        for version, entry in versions.items():
            where = f"packages.{name}.{version}"
            if not isinstance(entry, dict):
                raise InputError(CACHE, where, "not an object")
            requires = entry.get("requires_dist")
            if not (isinstance(requires, list) and all(isinstance(r, str) for r in requires)):
                raise InputError(CACHE, f"{where}.requires_dist", "not a list of requirement strings")
            for number, text in enumerate(requires):
                try:
                    Requirement(text)
                except InvalidRequirement as exc:
                    raise InputError(CACHE, f"{where}.requires_dist[{number}]", str(exc)) from None
            hashes = entry.get("hashes")
            if not (isinstance(hashes, list) and hashes and all(_is_sha256(h) for h in hashes)):
                raise InputError(CACHE, f"{where}.hashes", "missing or not sha256:<64 hex digits> strings")
    return packages


def render_cache(used: dict[str, dict[str, dict]]) -> str:
    data = {
        "_comment": "Written by scripts/image_requirements.py: what it read from PyPI for the image pins "
                    "that Pipfile.lock does not provide (the Requires-Dist of the wheel in metadata_from, "
                    "the sha256 of every file pip could install on the image). Regenerate it; do not edit.",
        "packages": {name: dict(sorted(used[name].items(), key=lambda kv: Version(kv[0])))
                     for name in sorted(used)},
    }
    return json.dumps(data, indent=2, sort_keys=False) + "\n"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # noqa: D102 - argparse hook: one line, like every other bad input
        print(f"{self.prog}: error: {message} (see --help)", file=sys.stderr)
        raise SystemExit(EXIT_BAD_INPUT)


def main(argv: list[str] | None = None, root: Path = ROOT) -> int:
    parser = _Parser(prog="image_requirements.py", description=__doc__,
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="offline; exit 1 if a generated file is stale")
    mode.add_argument("--upgrade", action="store_true", help="re-pick from PyPI what the lock does not pin")
    args = parser.parse_args(argv)
    try:
        outputs = generate(root, online=not args.check, upgrade=args.upgrade)
    except InputError as exc:
        print(f"image_requirements.py: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except Unresolved as exc:
        print(f"image_requirements.py: out of date: {exc}: run `python scripts/image_requirements.py`",
              file=sys.stderr)
        return EXIT_STALE
    stale = []
    for rel, text in outputs.items():
        path = root / rel
        current = path.read_text() if path.exists() else ""
        if current == text:
            continue
        if args.check:
            diff = difflib.unified_diff(current.splitlines(), text.splitlines(), rel, "generated",
                                        lineterm="", n=0)
            print("\n".join(list(diff)[:20]), file=sys.stderr)
            stale.append(rel)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            print(f"wrote {rel} (sha256 {hashlib.sha256(text.encode()).hexdigest()[:12]})")
    if stale:
        print(f"image_requirements.py: out of date: {', '.join(stale)}: "
              "run `python scripts/image_requirements.py`", file=sys.stderr)
        return EXIT_STALE
    return 0


if __name__ == "__main__":
    sys.exit(main())
