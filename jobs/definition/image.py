"""The trainer image: its build context, its content-hash tag, its variants, and the images the trainer
runs on.

The build context is what ``.dockerignore`` lets through (an allowlist: ``*`` then ``!path`` lines, then
``**/<name>`` exclusions), read with the rules Docker applies, so the tarball Cloud Build receives is exactly
what ``docker build .`` in this checkout would send. The tag is ``<variant>-<hash>``, the hash covering every
file of that context (Dockerfile, pinned requirements, trainer code): identical code is built once, and a
changed pin or line of trainer code gets a new tag.

Also here, as data: which machine takes which variant, and which Vertex AI prebuilt images the trainer sdist
can run on (python-package delivery). Nothing in this module imports TensorFlow or a cloud SDK.
"""

from __future__ import annotations

import fnmatch
import gzip
import hashlib
import io
import os
import re
import stat
import tarfile
from dataclasses import dataclass
from pathlib import Path

from jobs.definition.errors import FieldError

DOCKERFILE = "Dockerfile"
DOCKERIGNORE = ".dockerignore"
VARIANTS = ("cpu", "gpu", "tpu")
HASH_LENGTH = 16
# A trainer image tag as run_job.py builds it.
TAG = re.compile(rf"({'|'.join(VARIANTS)})-([0-9a-f]{{{HASH_LENGTH}}})")
# The context is source code and pinned requirements; anything near this size is a .dockerignore mistake
# (a dataset or a virtualenv let through) that would be uploaded on every build.
MAX_CONTEXT_BYTES = 64 << 20
MAX_CONTEXT_FILES = 5000
MAX_RULES_BYTES = 64 << 10

# Vertex AI's prebuilt TensorFlow training images (python-package delivery), e.g.
# us-docker.pkg.dev/vertex-ai/training/tf-cpu.2-17.py310:latest
PREBUILT = re.compile(
    r"(?:[a-z]+-docker\.pkg\.dev/vertex-ai/training|gcr\.io/cloud-aiplatform/training)/"
    r"(?P<framework>[a-z0-9-]+?)(?:-(?P<variant>cpu|gpu|tpu))?\.(?P<major>\d+)-(?P<minor>\d+)"
    r"(?:\.(?:py|cp)\d+)?(?::[\w.-]+)?"
)
# The oldest TensorFlow the trainer sdist is tested on (tests/trainer/test_prebuilt_compat.py): Keras 3 is
# required (the tf-*.2-15 images ship Keras 2) and the export needs what TF 2.17 provides. The prebuilt
# images end at 2.17, so in practice this is the one line that still runs.
PREBUILT_TF_FLOOR = (2, 17)
RUNNABLE_PREBUILT = (
    "us-docker.pkg.dev/vertex-ai/training/tf-cpu.2-17.py310:latest",
    "us-docker.pkg.dev/vertex-ai/training/tf-gpu.2-17.py310:latest",
)


class ImageError(FieldError):
    """The build context cannot be read; ``file`` and ``field`` say where (a one-line JobError upstream)."""

    def __init__(self, file: str, field: str, problem: str, allowed: str = "") -> None:
        super().__init__(field, problem, allowed, file=file)

    @property
    def field(self) -> str:
        return self.path


@dataclass(frozen=True)
class Rule:
    pattern: str
    include: bool  # a `!pattern` line lets matching paths back in


def read_rules(repo_root: Path) -> tuple[Rule, ...]:
    path = repo_root / DOCKERIGNORE
    _regular_file(path, DOCKERIGNORE)
    if path.stat().st_size > MAX_RULES_BYTES:
        raise ImageError(DOCKERIGNORE, "(file)", f"over {MAX_RULES_BYTES >> 10} KiB", "a short allowlist")
    text = _read_text(path, DOCKERIGNORE, "an allowlist: `*`, then `!path` lines")
    rules = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        include = line.startswith("!")
        pattern = os.path.normpath(line[1:].strip() if include else line).lstrip("/")
        if pattern.startswith("..") or pattern in ("", "."):
            raise ImageError(
                DOCKERIGNORE,
                f"line {number}",
                f"pattern {line!r} leaves the context",
                "paths inside the repository",
            )
        if "**" in pattern and not (pattern.startswith("**/") and "/" not in pattern[3:]):
            # The subset this reader implements exactly; anything else could silently differ from Docker.
            raise ImageError(
                DOCKERIGNORE,
                f"line {number}",
                f"unsupported pattern {line!r}",
                "paths, `*`/`?` within a path segment, or `**/<name>`",
            )
        rules.append(Rule(pattern.rstrip("/"), include))
    if not rules or rules[0] != Rule("*", False):
        raise ImageError(
            DOCKERIGNORE,
            "line 1",
            "the first rule must be `*` (an allowlist)",
            "`*`, then `!Dockerfile`, `!docker/`, `!trainer/` ...",
        )
    return tuple(rules)


def _matches(pattern: str, rel: str) -> bool:
    """Docker's rule: a pattern matches a path or any of its parent directories; `**` spans directories."""
    parts = rel.split("/")
    if pattern.startswith("**/"):
        return any(fnmatch.fnmatchcase(part, pattern[3:]) for part in parts)
    return any(_segment_match(pattern, "/".join(parts[: i + 1])) for i in range(len(parts)))


def _segment_match(pattern: str, path: str) -> bool:
    # fnmatch's `*` crosses `/`; Docker's (Go filepath.Match) does not.
    pattern_parts, path_parts = pattern.split("/"), path.split("/")
    return len(pattern_parts) == len(path_parts) and all(
        fnmatch.fnmatchcase(s, p) for p, s in zip(pattern_parts, path_parts, strict=True)
    )


def _included(rules: tuple[Rule, ...], rel: str) -> bool:
    included = True
    for rule in rules:
        if _matches(rule.pattern, rel):
            included = rule.include
    return included


def context_files(repo_root: Path) -> list[str]:
    """POSIX paths (relative to the repo root, sorted) of the build context's files.

    Fails fast, before reading any content, on what the context must not hold: links, pipes or devices (a
    link could pull in anything outside the checkout), more files or bytes than trainer sources come to.
    """
    rules = read_rules(repo_root)
    _regular_file(repo_root / DOCKERFILE, DOCKERFILE)
    files: list[str] = []
    total = 0
    for dirpath, dirnames, filenames in os.walk(repo_root):
        base = Path(dirpath).relative_to(repo_root).as_posix()
        # os.walk lists a link to a directory among the directories and never enters it: check it as an entry.
        links = [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]
        # Prune what no rule can bring back, so .venv or node_modules are never walked.
        dirnames[:] = sorted(d for d in dirnames if d not in links and _may_contain(rules, _join(base, d)))
        for name in sorted(filenames + links):
            rel = _join(base, name)
            if not _included(rules, rel):
                continue
            info = os.lstat(repo_root / rel)
            if not stat.S_ISREG(info.st_mode):
                raise ImageError(
                    rel,
                    "(file)",
                    "not a regular file (a link, pipe or device) in the build context",
                    "regular files only; exclude it in .dockerignore",
                )
            files.append(rel)
            total += info.st_size
            if len(files) > MAX_CONTEXT_FILES or total > MAX_CONTEXT_BYTES:
                raise ImageError(
                    DOCKERIGNORE,
                    "(rules)",
                    f"the build context is over {MAX_CONTEXT_FILES} files or {MAX_CONTEXT_BYTES >> 20} MiB "
                    f"(at {rel})",
                    "an allowlist of the trainer's sources",
                )
    if DOCKERFILE not in files:
        raise ImageError(
            DOCKERIGNORE, "(rules)", f"{DOCKERFILE} is not in the build context", f"a `!{DOCKERFILE}` line"
        )
    return sorted(files)


def _join(base: str, name: str) -> str:
    return name if base == "." else f"{base}/{name}"


def _may_contain(rules: tuple[Rule, ...], rel_dir: str) -> bool:
    if _included(rules, rel_dir):
        return True
    # An excluded directory is still walked when an include rule names something inside it.
    return any(
        r.include and (r.pattern.startswith(rel_dir + "/") or r.pattern.startswith("**/")) for r in rules
    )


def image_hash(repo_root: Path) -> str:
    """The content hash in the tag: every context file's path and bytes."""
    digest = hashlib.sha256()
    for rel in context_files(repo_root):
        _hash_file(digest, rel, _read_bytes(repo_root / rel, rel))
    return digest.hexdigest()[:HASH_LENGTH]


def _hash_file(digest, rel: str, data: bytes) -> None:
    """The one rule for what a file adds to the tag hash (image_hash and write_context must agree)."""
    digest.update(rel.encode() + b"\0" + data + b"\0")


def write_context(repo_root: Path, out: Path) -> tuple[int, int, str]:
    """The context as a reproducible .tar.gz (fixed mtimes, owners, modes).

    Returns (files, uncompressed bytes, image hash of exactly what was written)."""
    files = context_files(repo_root)
    total = 0
    digest = hashlib.sha256()
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for rel in files:
            data = _read_bytes(repo_root / rel, rel)
            _hash_file(digest, rel, data)
            total += len(data)
            info = tarfile.TarInfo(rel)
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            tar.addfile(info, io.BytesIO(data))
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "wb") as raw, gzip.GzipFile(filename="", fileobj=raw, mode="wb", mtime=0) as gz:
        gz.write(buffer.getvalue())
    return len(files), total, digest.hexdigest()[:HASH_LENGTH]


def _read_text(path: Path, name: str, allowed: str) -> str:
    try:
        return _read_bytes(path, name, allowed).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ImageError(name, "(file)", f"not UTF-8 text (byte {exc.start})", allowed) from None


def _read_bytes(path: Path, name: str, allowed: str = "a readable regular file") -> bytes:
    _regular_file(path, name)
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ImageError(name, "(file)", f"cannot read: {exc.strerror or exc}", allowed) from None


def _regular_file(path: Path, name: str) -> None:
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        raise ImageError(
            name, "(file)", "missing: the trainer image is built from it", f"a {name} at the repository root"
        ) from None
    except OSError as exc:
        raise ImageError(
            name, "(file)", f"cannot read: {exc.strerror or exc}", "a readable regular file"
        ) from None
    if not stat.S_ISREG(mode):
        raise ImageError(
            name, "(file)", "not a regular file", "a regular file (not a link, pipe or directory)"
        )


# --- which image a machine needs -------------------------------------------------------------------------


def variant_for_machine(machine: dict) -> str:
    """cpu, gpu or tpu: from the accelerator, or the one a machine type comes with (a2-*, ct5lp-*)."""
    from jobs.definition.machines import TPU_PREFIX, carries_tpu, family_of

    accelerator = str(machine.get("acceleratorType", "") or "")
    family = family_of(str(machine.get("machineType", "")))
    if accelerator in ("", "ACCELERATOR_TYPE_UNSPECIFIED") and family and family.accelerators:
        # TPU machine types always carry their TPU; GPU ones only when the family requires one.
        if carries_tpu(family) or family.accelerator_required:
            accelerator = family.accelerators[0]
    if accelerator.startswith(TPU_PREFIX):
        return "tpu"
    if accelerator.startswith("NVIDIA_"):
        return "gpu"
    return "cpu"


@dataclass(frozen=True)
class Prebuilt:
    framework: str
    variant: str
    version: tuple[int, int]


def parse_prebuilt(uri: str) -> Prebuilt | None:
    found = PREBUILT.fullmatch(uri)
    if not found:
        return None
    return Prebuilt(found["framework"], found["variant"] or "cpu", (int(found["major"]), int(found["minor"])))
