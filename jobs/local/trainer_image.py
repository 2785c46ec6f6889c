"""The trainer image built on this machine: ``scripts/build_image.py --local VARIANT`` (``make image``).

The same Dockerfile target and the same build context as Cloud Build (``jobs.definition.image.write_context``:
what ``.dockerignore`` lets through), tagged ``localhost/trainer:<variant>-<hash>`` with the same content
hash, so unchanged code is never rebuilt: the tag's presence is the check. The base is the Dockerfile's
``BASE_IMAGE`` (python:3.11.15-slim-trixie by digest) where the engine has it or can pull it, else the local
Debian bookworm base of :mod:`jobs.local.base_image` (bootstrapped once).
"""

from __future__ import annotations

import re
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from jobs.definition.image import DOCKERFILE, VARIANTS, image_hash, write_context
from jobs.local import base_image
from jobs.local.engine import Engine, EngineError, machine_lock

LOCAL_REPOSITORY = "localhost/trainer"
BASE_ARG = "BASE_IMAGE"
BASE_LABEL = "org.opencontainers.image.base.name"
# Variants built on request only (--allow-large): the gpu target's twelve CUDA wheels are 1.9 GB to download
# (cuDNN 577 MB, cuBLAS 363 MB, NCCL 323 MB, ...; PyPI's sizes, 2026-11) and the image 5.41 GB (392 s here,
# against 272 s and 2.42 GB for cpu), for an image that needs a GPU to be of any use. The tpu target downloads
# about as much as the cpu one (tensorflow-tpu 263 MB + libtpu 134 MB against TensorFlow's 572 MB).
LARGE = {"gpu": "its CUDA wheels are 1.9 GB to download (2.5 GB with TensorFlow)"}
_ARG = re.compile(rf"^ARG {BASE_ARG}=(\S+)\s*$", re.MULTILINE)


@dataclass(frozen=True)
class LocalImage:
    ref: str  # localhost/trainer:<variant>-<hash>
    variant: str
    digest: str
    built: bool  # False: the tag was already there
    base: str = ""  # the base it was built on (the image's label when it was reused)


def local_ref(variant: str, digest: str) -> str:
    return f"{LOCAL_REPOSITORY}:{variant}-{digest}"


def dockerfile_base(repo_root: Path) -> str:
    """The Dockerfile's default BASE_IMAGE (the real base, by digest)."""
    found = _ARG.search((repo_root / DOCKERFILE).read_text(encoding="utf-8"))
    if not found:
        raise EngineError(f"no `ARG {BASE_ARG}=...` line", "the Dockerfile's first lines", path=DOCKERFILE)
    return found[1]


def choose_base(engine: Engine, repo_root: Path, out: TextIO | None = None) -> str:
    """The Dockerfile's base where the engine has or can pull it, else the local bookworm base."""
    real = dockerfile_base(repo_root)
    if engine.image_exists(real) or engine.pull(real):
        return real
    if out is not None:
        out.write(f"{real} cannot be pulled (no registry answers): building on {base_image.BASE_REF}\n")
    return base_image.ensure_base(engine, out)


def ensure_image(
    engine: Engine,
    repo_root: Path,
    variant: str = "cpu",
    out: TextIO | None = None,
    *,
    base: str | None = None,
    allow_large: bool = False,
) -> LocalImage:
    """The trainer image of this checkout for ``variant``: reused by its tag, else built (output streamed to
    ``out``); BuildError naming the failing Dockerfile step."""
    if variant not in VARIANTS:
        raise EngineError(f"unknown variant {variant!r}", ", ".join(VARIANTS), path="variant")
    digest = image_hash(repo_root)
    # One build of a tag at a time on this machine (two test workers, `make image` beside a test run): the
    # second waits for the first and then finds its tag.
    with machine_lock(f"trainer-image-{variant}-{digest}"):
        return _ensure(engine, repo_root, variant, digest, out, base, allow_large)


def _ensure(
    engine: Engine,
    repo_root: Path,
    variant: str,
    digest: str,
    out: TextIO | None,
    base: str | None,
    allow_large: bool,
) -> LocalImage:
    ref = local_ref(variant, digest)
    if engine.image_exists(ref):
        labels = engine.image_labels(ref)
        return LocalImage(ref, variant, digest, built=False, base=labels.get(BASE_LABEL, ""))
    if variant in LARGE and not allow_large:
        raise EngineError(
            f"not building the {variant} image here: {LARGE[variant]}",
            f"cpu and tpu; --allow-large builds {variant} anyway",
            path="variant",
        )
    base = base or choose_base(engine, repo_root, out)
    with tempfile.TemporaryDirectory(prefix="trainer-context-") as tmp:
        # Exactly the bytes the tag hashes (the tarball Cloud Build would get), unpacked for the engine.
        archive = Path(tmp) / "context.tar.gz"
        _, _, written = write_context(repo_root, archive)
        context = Path(tmp) / "context"
        with tarfile.open(archive) as tar:
            tar.extractall(context, filter="data")
        ref = local_ref(variant, written)
        engine.build(
            context,
            ref,
            target=variant,
            build_args={BASE_ARG: base},
            # No label carries the hash: Podman's layer cache reuses an image whose labels differ only in
            # value (after a change outside the image, e.g. a Dockerfile comment); the tag is the record.
            labels={BASE_LABEL: base},
            out=out,
        )
    return LocalImage(ref, variant, written, built=True, base=base)
