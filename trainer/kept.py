"""What a task keeps of its pre-training work for the job's other trials and restarts.

A tuning study's trials and a restarted worker read the same files again; what was computed from them before
the first step (census's scans, the recommender's baselines) is kept under ``Shard.cache_dir``
(:func:`trainer.env.data_cache_dir`), named by a key of the files' identity (path, size, modification time)
and everything else the result depends on, so a changed file or flag is a different key, never a stale hit.

Kept files are written whole and then renamed (a reader never sees half of one), and are a cache only: one
that cannot be read or written is logged and the work is done again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Sequence

log = logging.getLogger("trainer")


def files_identity(files: Sequence[str]) -> list[list]:
    """``[path, size, mtime_nsec]`` per file (local or ``gs://``); raises ``tf.errors.OpError``."""
    import tensorflow as tf

    out = []
    for path in files:
        stat = tf.io.gfile.stat(path)
        out.append([path, stat.length, stat.mtime_nsec])
    return out


def key(*parts) -> str:
    """A file name for a kept result that depends on ``parts`` (JSON-serialisable) and nothing else."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32]


def read(path: str, max_bytes: int, what: str) -> bytes | None:
    """The kept bytes at ``path``, or None when there are none or they cannot be read (logged)."""
    import tensorflow as tf

    try:
        if not tf.io.gfile.exists(path):
            return None
        if tf.io.gfile.stat(path).length > max_bytes:
            raise ValueError(f"larger than {max_bytes} bytes")
        with tf.io.gfile.GFile(path, "rb") as f:
            return f.read()
    except (tf.errors.OpError, OSError, ValueError) as exc:
        log.warning("not reading the kept %s %s (%s): computing it again", what, path, exc)
        return None


def write(path: str, data: bytes, what: str) -> None:
    """Keep ``data`` at ``path``; a place the job cannot write to only costs the later runs the work."""
    import tensorflow as tf

    partial = f"{path}.partial-{os.getpid()}"
    try:
        tf.io.gfile.makedirs(path.rsplit("/", 1)[0])
        with tf.io.gfile.GFile(partial, "wb") as f:
            f.write(data)
        tf.io.gfile.rename(partial, path, overwrite=True)
    except tf.errors.OpError as exc:
        lines = (exc.message or "").strip().splitlines()
        log.warning("could not keep the %s at %s: %s", what, path, lines[0] if lines else type(exc).__name__)
