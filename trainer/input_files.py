"""A task's input files: listing them, reading them within bounds, the one-line error bad input raises, and
the memory a task may cache of them.

Every file access goes through ``tf.io.gfile``, so local paths, globs, several files and ``gs://`` URIs all
work the same way. What a file may cost is bounded before it is paid: at most MAX_FILES files a flag, regular
files only, and lines of at most MAX_LINE_BYTES.

Delimited text is read on top of this: :mod:`trainer.csv_schema` (a file's layout and the bad rows),
:mod:`trainer.csv_rows` (each row's check), :mod:`trainer.csv_scan` (the validating scan and its statistics)
and :mod:`trainer.csv_dataset` (the streaming tf.data pipeline).
"""

from __future__ import annotations

import glob
import os
import stat
from collections.abc import Mapping, Sequence

# A scan reads files in blocks of this size, so memory stays flat on large inputs.
_BLOCK_BYTES = 4 << 20
# The share of the available memory one process's in-memory caches may take, divided among the cluster's
# processes on the same host (see cache_budget).
_MEMORY_SHARE = 0.5
# The longest line a scan reads (a file without line breaks would otherwise be read into memory whole).
MAX_LINE_BYTES = 8 << 20


class DataError(ValueError):
    """Bad input data; ``str()`` is one line naming the file (and line) and what is wrong."""


def _is_uri(path: str) -> bool:
    return "://" in path


# The most files one flag's paths and globs may name: every file is checked before training, and a
# scan keeps per-file state. A data set of more shards than this is better merged into fewer, larger ones.
MAX_FILES = 10_000
_SHOWN_FILES = 3  # file names an error lists before "(+N more)"


def name_files(files: Sequence[str]) -> str:
    """The first few of ``files`` and how many more: an error's line stays short for any number of files."""
    shown = ", ".join(files[:_SHOWN_FILES])
    return shown + (f" (+{len(files) - _SHOWN_FILES} more)" if len(files) > _SHOWN_FILES else "")


def expand_files(patterns: Sequence[str], flag: str) -> tuple[str, ...]:
    """Resolve paths and globs (local or gs://) to a de-duplicated tuple of files, sorted per pattern.

    Local paths are expanded without TensorFlow, so a missing local file is reported before it is imported.
    Matching directories are left out; any other match that is not a regular file (a FIFO, a socket, a
    device) is refused, as are more than MAX_FILES files.
    """
    files: dict[str, None] = {}  # insertion-ordered and de-duplicated in linear time
    for pattern in patterns:
        if _is_uri(pattern):
            matches = _glob_uri(pattern, flag)
        else:
            matches = local_files(sorted(glob.glob(pattern)), pattern, flag)
        if not matches:
            raise DataError(f"{flag}: no such file: {pattern}")
        files.update(dict.fromkeys(matches))
        check_file_count(files, patterns, flag)
    return tuple(files)


def local_files(matches: Sequence[str], pattern: str, flag: str) -> list[str]:
    """The regular files among a local glob's ``matches``: directories are left out, anything else that is
    not a regular file is refused (reading a FIFO blocks until a writer comes, forever for a training job).
    ``os.stat`` opens nothing, so checking a FIFO or a device has no effect on it."""
    check_file_count(matches, [pattern], flag)
    kept = []
    for path in matches:
        try:
            mode = os.stat(path).st_mode
        except OSError:  # gone since the glob, or a dangling link: as if it had not matched
            continue
        if stat.S_ISREG(mode):
            kept.append(path)
        elif not stat.S_ISDIR(mode):
            raise DataError(f"{flag}: {path}: is a {_file_kind(mode)}, not a regular file")
    return kept


def _file_kind(mode: int) -> str:
    for test, kind in ((stat.S_ISFIFO, "FIFO"), (stat.S_ISSOCK, "socket"), (stat.S_ISCHR, "character device"),
                       (stat.S_ISBLK, "block device")):
        if test(mode):
            return kind
    return "special file"


def check_file_count(files, patterns: Sequence[str], flag: str) -> None:
    if len(files) > MAX_FILES:
        names = list(files)
        raise DataError(f"{flag}: {len(names)} files match {name_files(list(patterns))}, more than the "
                        f"{MAX_FILES} allowed (merge the data into fewer, larger files): {name_files(names)}")


def _glob_uri(pattern: str, flag: str) -> list[str]:
    import tensorflow as tf

    try:
        matches = sorted(tf.io.gfile.glob(pattern))
    except tf.errors.OpError as exc:  # e.g. gs:// without network or credentials
        raise DataError(f"{flag}: cannot list {pattern}: {op_reason(exc)}") from None
    check_file_count(matches, [pattern], flag)
    return [m for m in matches if not tf.io.gfile.isdir(m)]


def op_reason(exc) -> str:
    """The first line of a tf.errors.OpError's message (some, e.g. ram:// NotFoundError, have none); for an
    error inside a tf.function ("Graph execution error:", the node, a stack), the op's own line."""
    lines = [line.strip() for line in (exc.message or "").strip().splitlines() if line.strip()]
    if lines and lines[0] == "Graph execution error:":
        reason = [line for line, after in zip(lines, lines[1:], strict=False) if after.startswith("[[")]
        return reason[0] if reason else lines[-1]
    return lines[0] if lines else type(exc).__name__


def unreadable(path: str, exc, flag: str) -> DataError:
    """A read failure (e.g. gs:// without access; local files were checked before) as one line."""
    return DataError(f"{flag + ': ' if flag else ''}cannot read {path}: {op_reason(exc)}")


def read_lines(path: str, flag: str):
    """Yield the lines of ``path`` exactly as TextLineDataset splits them (no trailing empty line)."""
    for block in complete_lines(path, flag):
        for line in block.split(b"\n")[:-1]:
            yield line[:-1] if line.endswith(b"\r") else line


def complete_lines(path: str, flag: str):
    """Blocks of ``path`` cut after their last newline, each a run of whole lines ending in b"\n" (a last
    line without one gets it), so the lines are exactly TextLineDataset's plus their newlines."""
    import tensorflow as tf

    tail = b""
    lines = 0  # complete lines before ``tail``, for an error naming the line
    try:
        with tf.io.gfile.GFile(path, "rb") as f:
            while True:
                block = f.read(_BLOCK_BYTES)
                if not block:
                    break
                cut = block.rfind(b"\n") + 1
                # A line longer than a block is read on, within the bound, also where it ends in this block.
                if len(tail) + (block.find(b"\n") if cut else len(block)) > MAX_LINE_BYTES:
                    raise DataError(f"{path}:{lines + 1}: malformed row: longer than {MAX_LINE_BYTES} "
                                    "bytes (a row of this data is a line of text)")
                if not cut:
                    tail += block
                    continue
                chunk = tail + block[:cut]
                lines += chunk.count(b"\n")
                yield chunk
                tail = block[cut:]
    except tf.errors.OpError as exc:
        raise unreadable(path, exc, flag) from None
    if tail:
        yield tail + b"\n"


def cache_budget(limit_mb: int, environ: Mapping[str, str] = os.environ) -> int:
    """Bytes one process may cache in memory: ``limit_mb`` (the --cache-limit-mb flag), and at most a share of
    the memory available on this machine divided among the cluster's processes that run on it (a local
    multi-worker run, or several trials of a local study, would otherwise each take the whole)."""
    budget = limit_mb << 20
    available = _available_memory()
    if available is not None:
        budget = min(budget, int(available * _MEMORY_SHARE / _local_processes(environ)))
    return budget


def _available_memory() -> int | None:
    """MemAvailable, lowered to the cgroup's remaining allowance in a container; None where unknown."""
    found = []
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    found.append(int(line.split()[1]) * 1024)
    except OSError:
        pass
    try:
        with open("/sys/fs/cgroup/memory.max") as f:
            limit = f.read().strip()
        with open("/sys/fs/cgroup/memory.current") as f:
            used = int(f.read().strip())
        if limit != "max":
            found.append(max(0, int(limit) - used))
    except (OSError, ValueError):
        pass
    return min(found) if found else None


def _local_processes(environ: Mapping[str, str]) -> int:
    """Processes of this cluster on this machine (1 outside a cluster): those sharing this task's host."""
    from trainer.env import cluster_from_env

    try:
        cluster = cluster_from_env(environ)
    except ValueError:  # a bad TF_CONFIG is reported where the strategy is made
        return 1
    addresses = [a for role in ("chief", "master", "worker") for a in cluster.spec.get(role, [])]
    mine = cluster.spec.get(cluster.task_type, [])
    if not addresses or cluster.task_index >= len(mine):
        return 1
    host = mine[cluster.task_index].rsplit(":", 1)[0]
    return max(1, sum(a.rsplit(":", 1)[0] == host for a in addresses))
