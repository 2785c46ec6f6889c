"""The on-disk cache of a task's pre-training results, for the job's other trials and restarts.

A tuning study's trials and a restarted worker read the same files again; what was computed from them before
the first step (census's scans, the image classifier's checked scans, the recommender's baselines and
item-item weights) is cached under ``Shard.cache_dir`` (:func:`trainer.env.data_cache_dir`), named by a key of
the files' identity (path, size, modification time) and everything else the result depends on, so a changed
file or flag is a different key, never a stale hit.

Cached files are written whole (a local one synced to disk) and then renamed (a reader never sees half of
one), and nothing depends on them: one that cannot be read, decoded (:data:`DECODE_ERRORS`) or written is
logged and the work is done again, and a run that computed it again replaces it.

The input pipelines' in-memory caches (parsed rows or decoded images held for a run's later epochs, within
``--cache-limit-mb``) are another thing, which lasts one run: they are called in-memory caches wherever the
two could be confused.

**Claims.** A local study runs trials in parallel: two trials that start together would both miss a result
and both compute it (minutes and GBs each). ``read(..., claim=True)`` therefore claims a result it misses:
an exclusive ``flock`` on ``<cached file>.lock``, one per result (not per folder), held from the miss until
:func:`write` cached it or :func:`release_claims` gave it up (``trainer.train.run`` calls it in a ``finally``:
a run refused for bad data, or that failed in any other way, caches nothing and must let a waiting trial
compute). A second run that misses a claimed result logs one line, waits (at most :data:`WAIT_SECONDS`, then
computes anyway with a warning: a wedged holder never stalls a study) and reads it again; if the holder
cached nothing, the waiter computes it itself (and refuses bad data with the same message). Process death
releases a flock by itself. The lock file is removed by its holder when it releases it (a taker checks that
the file it locked is still the one at the path), and so are the folders its claim created when nothing was
cached in them: a run refused for bad data writes nothing. Only a holder killed outright leaves its lock file,
which the next claim of that result takes over and removes.

What never claims, and computes as without claims:

- a ``gs://`` (any non-local) folder: Vertex AI runs a study's trials on separate machines, where a lock
  on one machine's file means nothing to another, and Cloud Storage has no advisory locks;
- a folder that cannot be written or a lock that cannot be taken (read-only, no flock support): logged;
- a multi-worker run (:func:`may_claim`): its workers run collectives (``Shard.exchange``) between
  computing a result and caching it, so a worker would hold a claim while it waits for its trial's other
  workers. Two such trials on one host could deadlock: trial A's worker 0 holds share 0's claim and waits
  in a collective for A's worker 1, which waits for share 1's claim held by B's worker 1, which waits in a
  collective for B's worker 0, which waits for share 0's claim. Each worker computes its share as before;
- a run that already holds a claim and finds another one busy: it computes that one too rather than wait
  while holding (two runs waiting on each other's claims, e.g. the same files as train in one and eval in
  the other, would deadlock until the timeout).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import secrets
import time
import zipfile
from collections.abc import Sequence

log = logging.getLogger("trainer")

# How long a run waits for another run's claim before it computes the result itself (with a warning): far
# longer than any pre-training work here takes (MNIST's 800k images decode in minutes), so only a wedged
# holder is ever given up on.
WAIT_SECONDS = 1800.0
_POLL_SECONDS = (0.05, 0.25)  # the first and the longest pause between two tries of a busy claim

# This process's claims, {cached file's path: (the lock file's descriptor, the folders the claim created,
# deepest first)}. A path claimed twice by one process (census's train and eval scans of the same files share
# a key) is claimed once: flock conflicts between two open file descriptions even within one process, so a
# second flock would wait for itself.
_held: dict[str, tuple[int, list[str]]] = {}

# What decoding a damaged or foreign cached file raises: np.load of an empty file (EOFError), of a truncated
# or bit-flipped .npz (zipfile.BadZipFile), a missing or misshapen array, JSON that is not the format. A
# task's decoder catches these and computes the result again; anything else is a bug and is not hidden.
DECODE_ERRORS = (OSError, EOFError, ValueError, KeyError, IndexError, TypeError, zipfile.BadZipFile)


def files_identity(files: Sequence[str]) -> list[list]:
    """``[path, size, mtime_nsec]`` per file (local or ``gs://``); raises ``tf.errors.OpError``."""
    import tensorflow as tf

    out = []
    for path in files:
        stat = tf.io.gfile.stat(path)
        out.append([path, stat.length, stat.mtime_nsec])
    return out


def key(*parts) -> str:
    """A file name for a cached result that depends on ``parts`` (JSON-serialisable) and nothing else."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32]


def may_claim(shard) -> bool:
    """Whether a run under ``shard`` (trainer.sharding.Shard) claims the results it misses: one worker only
    (see the module docstring: a multi-worker run's collectives and claims could deadlock)."""
    return not shard.sharded


def read(path: str, max_bytes: int, what: str, *, claim: bool = False) -> bytes | None:
    """The cached bytes at ``path``, or None when there are none or they cannot be read (logged).

    ``claim``: on a miss, claim the right to compute it (see the module docstring), waiting for another run
    that holds the claim and reading what it cached. None then means: compute it, and cache it with
    :func:`write` (which releases the claim) or give it up with :func:`release_claims`."""
    raw, missing = _read(path, max_bytes, what)
    if not (missing and claim and _claim(path, what)):  # a cached file that cannot be read: not claimed
        return raw
    # Read again even when the claim was free: another run may have cached it and released between our miss
    # and our claim.
    raw, _ = _read(path, max_bytes, what)
    if raw is not None:
        release(path)
    return raw


def _read(path: str, max_bytes: int, what: str) -> tuple[bytes | None, bool]:
    """(the cached bytes or None, whether there are none at ``path``)."""
    import tensorflow as tf

    try:
        if not tf.io.gfile.exists(path):
            return None, True
        if tf.io.gfile.stat(path).length > max_bytes:
            raise ValueError(f"larger than {max_bytes} bytes")
        with tf.io.gfile.GFile(path, "rb") as f:
            return f.read(), False
    except (tf.errors.OpError, OSError, ValueError) as exc:
        log.warning("not reading the cached %s %s (%s): computing it again", what, path, exc)
        return None, False


def write(path: str, data: bytes, what: str) -> None:
    """Cache ``data`` at ``path`` and release this process's claim on it; a place the job cannot write to
    only costs the later runs the work."""
    import tensorflow as tf

    # Unique per writer: trials on separate machines (gs://) may share a pid.
    partial = f"{path}.partial-{os.getpid()}-{secrets.token_hex(4)}"
    try:
        tf.io.gfile.makedirs(path.rsplit("/", 1)[0])
        if "://" in path:
            with tf.io.gfile.GFile(partial, "wb") as f:
                f.write(data)
        else:
            # Synced before the rename: after a power loss the cached file is whole or absent, never the empty
            # file a journalling file system may otherwise leave under the new name.
            with open(partial, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        tf.io.gfile.rename(partial, path, overwrite=True)
    except (tf.errors.OpError, OSError) as exc:
        message = exc.message if isinstance(exc, tf.errors.OpError) else str(exc)
        lines = (message or "").strip().splitlines()
        log.warning("could not cache the %s at %s: %s", what, path, lines[0] if lines else type(exc).__name__)
        try:  # a full disk must not keep a near-whole copy per failed run
            tf.io.gfile.remove(partial)
        except (tf.errors.OpError, OSError):
            pass
    finally:
        release(path)


def held() -> list[str]:
    """The paths of the results this process holds a claim on."""
    return list(_held)


def release(path: str) -> None:
    """Give up this process's claim on ``path``, if it holds one (a run waiting for it goes on). The lock
    file goes, and so do the folders the claim created if they are empty (nothing was cached): a run refused
    for bad data writes nothing."""
    fd, created = _held.pop(path, (None, []))
    if fd is None:
        return
    try:
        os.unlink(_lock_path(path))  # while still locked: a taker that opened it sees it is gone and retries
        for folder in created:
            os.rmdir(folder)
    except OSError:  # a folder holding something (what was cached) stays
        pass
    os.close(fd)  # releases the flock


def release_claims() -> None:
    """Give up every claim this process holds (the end of a run, however it ends), the last one first: the
    first claim in a new folder made it, and removes it once the later claims' lock files are gone."""
    for path in reversed(list(_held)):
        release(path)


def _lock_path(path: str) -> str:
    return f"{path}.lock"


def _claim(path: str, what: str) -> bool:
    """Claim ``path`` for this process, waiting while another run holds it; False when no claim was taken
    (the caller computes without one: see the module docstring for when)."""
    if path in _held:
        return True
    if "://" in path:  # gs:// (Vertex AI's trials run on separate machines): no claims, see the docstring
        return False
    try:
        import fcntl
    except ImportError:  # Windows: no flock; the trainer runs on Linux and macOS
        return False

    lock = _lock_path(path)
    deadline, pause, vanished = None, _POLL_SECONDS[0], 0
    while True:
        created, folder = [], os.path.dirname(os.path.abspath(lock))
        while not os.path.isdir(folder) and folder != os.path.dirname(folder):
            created.append(folder)
            folder = os.path.dirname(folder)
        try:
            os.makedirs(os.path.dirname(os.path.abspath(lock)), exist_ok=True)
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        except FileNotFoundError as exc:  # a holder removed the folder it made between the two calls
            vanished += 1
            if vanished < 10:
                continue
            log.warning("could not claim the %s at %s (%s): computing it without a claim", what, path, exc)
            return False
        except OSError as exc:
            log.warning("could not claim the %s at %s (%s): computing it without a claim", what, path, exc)
            return False
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    pass
                if _held:
                    log.info("another run is computing the same %s (%s); this run holds another claim and "
                             "computes it too (waiting while holding one could deadlock)", what, lock)
                    os.close(fd)
                    return False
                now = time.monotonic()
                if deadline is None:  # once, however often the holder's file is replaced
                    deadline = now + WAIT_SECONDS
                    log.info("waiting for another run computing the same %s (%s)", what, lock)
                if now >= deadline:
                    log.warning("another run has computed the same %s for over %g s without caching it (%s): "
                                "computing it here too", what, WAIT_SECONDS, lock)
                    os.close(fd)
                    return False
                time.sleep(min(pause, deadline - now))
                pause = min(pause * 2, _POLL_SECONDS[1])
        except OSError as exc:  # e.g. ENOLCK: a file system without flock
            os.close(fd)
            log.warning("could not claim the %s at %s (%s): computing it without a claim", what, path, exc)
            return False
        try:
            same = os.path.samestat(os.fstat(fd), os.stat(lock))
        except OSError:  # the holder removed it as it released it
            same = False
        if same:
            _held[path] = (fd, created)
            return True
        os.close(fd)  # locked a file its holder has since removed: take the one at the path now
