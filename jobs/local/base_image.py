"""A stand-in for ``python:3.11-slim`` where no container registry can be reached: Debian bookworm,
bootstrapped from the Debian archive with ``debootstrap`` and imported into the engine as :data:`BASE_REF`.

It looks like python:slim to the Dockerfile: ``python`` and ``pip`` on PATH (bookworm's Python 3.11, the
lock's), pip may install into the system site-packages (bookworm's EXTERNALLY-MANAGED marker is removed),
ca-certificates, and groupadd/useradd. This machine's trusted CA bundle replaces the image's, and pip,
requests and OpenSSL are pointed at it: package downloads during a build verify against the same CAs as the
host (a proxy's own CA included). Built once (about 20 s and 130 MB) and reused by its tag.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import TextIO

from jobs.local.engine import Engine, EngineError, machine_lock

BASE_REF = "localhost/trainer-base:bookworm-py311"
SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
# passwd: groupadd/useradd (the Dockerfile creates the trainer user); python3-pip brings setuptools and wheel.
PACKAGES = ("python3", "python3-pip", "ca-certificates", "passwd")
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
BOOTSTRAP_TIMEOUT_S = 1800.0
# dpkg inside debootstrap's chroot reads this before it installs anything (debootstrap extracts the packages
# over the folder): no fsync per file, which cut its install from 107 s to 88 s on a loaded two-core machine.
# A crash mid-bootstrap loses only a temporary folder. prepare_rootfs removes it: the image is as before.
DPKG_UNSAFE_IO = "etc/dpkg/dpkg.cfg.d/bootstrap-unsafe-io"
CHANGES = (
    "ENV LANG=C.UTF-8",
    f"ENV SSL_CERT_FILE={CA_BUNDLE}",
    f"ENV PIP_CERT={CA_BUNDLE}",
    f"ENV REQUESTS_CA_BUNDLE={CA_BUNDLE}",
    'CMD ["python3"]',
    f"LABEL org.opencontainers.image.description=debootstrap-{SUITE}-python3.11-by-jobs/local/base_image.py",
)


def ensure_base(engine: Engine, out: TextIO | None = None) -> str:
    """:data:`BASE_REF`, bootstrapped first if the engine does not have it yet."""
    with machine_lock("trainer-base-image"):
        if not engine.image_exists(BASE_REF):
            bootstrap(engine, out)
    return BASE_REF


def bootstrap(engine: Engine, out: TextIO | None = None, *, workdir: Path | None = None) -> None:
    """debootstrap a minimal bookworm with Python into a temporary folder and import it as BASE_REF."""
    debootstrap = shutil.which("debootstrap")
    if debootstrap is None:
        raise EngineError(
            f"no registry can be reached and building the local base image {BASE_REF} needs debootstrap",
            "`apt-get install debootstrap` on Debian/Ubuntu",
            path="base image",
        )
    if os.geteuid() != 0:
        raise EngineError(
            f"building the local base image {BASE_REF} with debootstrap needs root",
            "run it as root once (`sudo make image`), or reach a registry",
            path="base image",
        )
    with tempfile.TemporaryDirectory(prefix="trainer-base-", dir=workdir) as tmp:
        rootfs = Path(tmp) / "rootfs"
        (rootfs / DPKG_UNSAFE_IO).parent.mkdir(parents=True)
        (rootfs / DPKG_UNSAFE_IO).write_text("force-unsafe-io\n")
        _stream(
            [debootstrap, "--variant=minbase", f"--include={','.join(PACKAGES)}", SUITE, str(rootfs), MIRROR],
            out,
        )
        prepare_rootfs(rootfs)
        tar = subprocess.Popen(
            ["tar", "--numeric-owner", "-C", str(rootfs), "-c", "."],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        try:
            assert tar.stdout is not None
            engine.import_rootfs(tar.stdout, BASE_REF, CHANGES)
        finally:
            tar.stdout.close()
            if tar.wait() != 0:
                engine.remove_image(BASE_REF)
                raise EngineError(f"tar of {rootfs} failed (exit status {tar.returncode})", path="base image")
    if out is not None:
        out.write(f"imported the local base image {BASE_REF}\n")


def prepare_rootfs(rootfs: Path, host_ca: Path = HOST_CA_BUNDLE) -> None:
    """What makes a bookworm root filesystem stand in for python:slim (see the module docstring)."""
    for marker in rootfs.glob("usr/lib/python3*/EXTERNALLY-MANAGED"):
        marker.unlink()
    (rootfs / DPKG_UNSAFE_IO).unlink(missing_ok=True)
    local_bin = rootfs / "usr/local/bin"
    local_bin.mkdir(parents=True, exist_ok=True)
    for name, target in (("python", "/usr/bin/python3"), ("pip", "/usr/bin/pip3")):
        link = local_bin / name
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(target)
    if host_ca.is_file():
        shutil.copyfile(host_ca, rootfs / CA_BUNDLE.lstrip("/"))
    # The package lists and downloaded .debs are 40+ MB the image never needs (builds use pip, not apt).
    for cache in ("var/cache/apt/archives", "var/lib/apt/lists"):
        for path in (rootfs / cache).glob("*"):
            if path.is_file() and path.name != "lock":
                path.unlink()


def _stream(argv: list[str], out: TextIO | None) -> None:
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    last = ""
    try:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            last = line.strip() or last
            if out is not None:
                out.write(line + "\n")
        status = proc.wait(timeout=BOOTSTRAP_TIMEOUT_S)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    if status != 0:
        raise EngineError(
            f"`{Path(argv[0]).name} ... {SUITE}` failed (exit status {status}): {last[:200]}",
            f"a reachable Debian mirror ({MIRROR})",
            path="base image",
        )
