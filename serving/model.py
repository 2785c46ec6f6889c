"""The model: a SavedModel folder checked before anything opens it, copied down when it is remote, loaded,
and each of its signatures warmed up once.

Everything here that reads no model (``model_dir_problem``) imports no TensorFlow: ``run_job.py serve``
checks MODEL_DIR with it before the server starts. A model is held to limits by its files' metadata alone:
saved_model.pb of at most MAX_GRAPH_BYTES (protobuf parses it whole, several times its size in memory; a
3 GB sparse file took 28 s and 10 GB before TensorFlow refused it), all files together at most
``max_model_bytes()`` and MAX_MODEL_ENTRIES files and folders, and every file regular: a FIFO or device is
refused by its mode, never opened (TensorFlow would block on it for ever).
"""

from __future__ import annotations

import logging
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Iterator
from typing import Any

from serving.requests import (
    DEFAULT_SIGNATURE,
    InputSpec,
    RequestError,
    Signature,
    example_instance,
    read_request,
)
from trainer.contract import signature_inputs

log = logging.getLogger("serving")

EXIT_FAILED = 1
EXIT_USAGE = 2

MAX_GRAPH_BYTES = 1 << 30  # saved_model.pb (protobuf's own limit is 2 GiB)
MAX_MODEL_BYTES = 32 << 30  # every file of the SavedModel together, and at most half the machine's memory
MAX_MODEL_ENTRIES = 10_000  # files and folders: a symlink loop or a flood of files ends the walk here


class ServeError(Exception):
    """Bad flags or a model that cannot be served: one line on stderr, exit status ``status``."""

    def __init__(self, message: str, status: int = EXIT_USAGE):
        super().__init__(message)
        self.status = status


def max_model_bytes() -> int:
    """MAX_MODEL_BYTES, or half this machine's memory where that is less: the variables are read into
    memory whole, and the requests need the other half."""
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # not POSIX: the fixed limit alone
        return MAX_MODEL_BYTES
    return min(MAX_MODEL_BYTES, memory // 2)


def model_dir_problem(path: str) -> str | None:
    """Why a local MODEL_DIR cannot be served (one line), or None. Reads metadata only: a FIFO or device in
    its place or anywhere inside is refused, never opened."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        return f"{path}: {exc.strerror.lower() if exc.strerror else 'cannot be read'}"
    if not stat.S_ISDIR(mode):
        return f"{path}: not a directory (a SavedModel is a folder with saved_model.pb)"
    graph = os.path.join(path, "saved_model.pb")
    try:
        regular = stat.S_ISREG(os.stat(graph).st_mode)
    except OSError:
        regular = None
    if not regular:
        why = "saved_model.pb is not a file" if regular is False else "no saved_model.pb"
        return f"{path}: no SavedModel here ({why})"
    return _files_problem(path, _local_files(path))


def _local_files(root: str) -> Iterator[tuple[str, int | None]]:
    """(path, size) of every entry under ``root``, size None for a folder; a non-regular file raises
    ValueError naming it. Symbolic links are followed as TensorFlow follows them (a loop ends at
    MAX_MODEL_ENTRIES)."""
    folders = [root]
    while folders:
        folder = folders.pop()
        with os.scandir(folder) as entries:
            for entry in entries:
                try:
                    mode = os.stat(entry.path).st_mode
                except OSError as exc:
                    raise ValueError(f"{entry.path}: {(exc.strerror or 'cannot be read').lower()}") from None
                if stat.S_ISDIR(mode):
                    folders.append(entry.path)
                    yield entry.path, None
                elif stat.S_ISREG(mode):
                    yield entry.path, os.stat(entry.path).st_size
                else:
                    raise ValueError(
                        f"{entry.path}: not a regular file ({_kind_of(mode)}); allowed: files and "
                        "folders only in a SavedModel"
                    )


def _kind_of(mode: int) -> str:
    for test, name in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a device"),
        (stat.S_ISBLK, "a device"),
    ):
        if test(mode):
            return name
    return "not a file"


def _files_problem(root: str, files: Iterator[tuple[str, int | None]]) -> str | None:
    """The first limit ``files`` (as _local_files yields them) breaks, or None."""
    limit, total, count = max_model_bytes(), 0, 0
    graph = os.path.join(root, "saved_model.pb")
    try:
        for path, size in files:
            count += 1
            if count > MAX_MODEL_ENTRIES:
                most = MAX_MODEL_ENTRIES
                return f"{root}: over {most} files and folders; allowed: at most {most}"
            if size is None:
                continue
            if path == graph and size > MAX_GRAPH_BYTES:
                return f"{path}: {size} bytes; allowed: a saved_model.pb of at most {MAX_GRAPH_BYTES} bytes"
            total += size
            if total > limit:
                return (
                    f"{root}: over {limit} bytes of files; allowed: a SavedModel of at most {limit} bytes "
                    "(half this machine's memory, at most MAX_MODEL_BYTES)"
                )
    except ValueError as exc:
        return str(exc)
    except OSError as exc:  # a folder that cannot be listed
        return f"{exc.filename or root}: {(exc.strerror or 'cannot be read').lower()}"
    return None


def remote(uri: str) -> bool:
    return "://" in uri


def copy_down(uri: str, into: str) -> str:
    """Copy the SavedModel folder ``uri`` (gs://, or any tf.io.gfile scheme) into the local folder ``into``.

    The listing is checked against the same limits as a local folder before a byte is copied; then one walk
    of whole files, finished before loading starts: a missing or unreadable model fails here with one line,
    and the loaded model never reads Cloud Storage again.
    """
    import tensorflow as tf

    start = time.perf_counter()
    root = uri.rstrip("/")
    if not tf.io.gfile.exists(f"{root}/saved_model.pb"):
        raise ServeError(f"{uri}: no SavedModel here (no saved_model.pb)")
    files = []  # (remote path, local folder)
    for folder, _, names in tf.io.gfile.walk(root):
        local = os.path.join(into, os.path.relpath(folder, root) if folder != root else "")
        files += [(f"{folder}/{name}", local) for name in names]
        if len(files) > MAX_MODEL_ENTRIES:
            raise ServeError(f"{uri}: over {MAX_MODEL_ENTRIES} files; allowed: at most {MAX_MODEL_ENTRIES}")
    problem = _files_problem(root, ((path, tf.io.gfile.stat(path).length) for path, _ in files))
    if problem:
        raise ServeError(problem)
    copied = 0
    for path, local_folder in files:
        os.makedirs(local_folder, exist_ok=True)
        local = os.path.join(local_folder, path.rsplit("/", 1)[1])
        tf.io.gfile.copy(path, local, overwrite=True)
        copied += os.path.getsize(local)
    log.info("copied %s to %s (%.1f MB in %.1f s)", uri, into, copied / 1e6, time.perf_counter() - start)
    return into


def load_model(source: str, into: str | None = None) -> tuple[dict[str, Signature], str | None]:
    """Load ``source`` (a local folder or a gs:// URI, copied into ``into`` or a new temporary folder) ->
    (its signatures, the temporary copy to remove)."""
    copy = (into or tempfile.mkdtemp(prefix="serving-")) if remote(source) else None
    try:
        path = copy_down(source, copy) if copy else source
        problem = model_dir_problem(path)  # a local folder again here: it may have changed since the start
        if problem:
            raise ServeError(problem)
        return _load(path, source), copy
    except BaseException:
        if copy:
            shutil.rmtree(copy, ignore_errors=True)
        raise


def _load(path: str, source: str) -> dict[str, Signature]:
    import tensorflow as tf

    try:
        loaded = tf.saved_model.load(path)
    except Exception as exc:  # noqa: BLE001 - whatever TensorFlow raises for a damaged model: one line
        reason = " ".join(str(exc).split())[:300] or type(exc).__name__
        raise ServeError(f"{source}: not a SavedModel that loads: {reason}") from None
    found = signatures_of(loaded)
    if not found:
        raise ServeError(f"{source}: the SavedModel has no serving signatures")
    for signature in found.values():
        _warm_up(signature)
    return found


def signatures_of(loaded) -> dict[str, Signature]:
    """The serving signatures of a loaded SavedModel, each callable with a dict of NumPy arrays."""
    import tensorflow as tf

    found = {}
    for name, fn in loaded.signatures.items():
        inputs = tuple(InputSpec(*spec) for spec in signature_inputs(fn))
        dtypes = {key: spec.dtype for key, spec in fn.structured_input_signature[1].items()}

        def call(columns, fn=fn, dtypes=dtypes):
            out = fn(**{key: tf.constant(value, dtype=dtypes[key]) for key, value in columns.items()})
            return {key: value.numpy() for key, value in out.items()}

        found[name] = Signature(name, inputs, tuple(sorted(fn.structured_outputs)), call)
    return found


def _warm_up(signature: Signature) -> None:
    """Call ``signature`` once: its first call optimises the graph and creates its kernels (~90 ms for the
    image classifier), which the first request would otherwise wait for."""
    try:
        payload = {"instances": [example_instance(signature)]}
        _, columns, _ = read_request(payload, {signature.name: signature})
        signature.call(columns)
    except Exception as exc:  # noqa: BLE001 - a model that refuses the example still got its graph built
        log.debug("warm-up of %s: %s", signature.name, exc)


def model_refusal(exc: Exception) -> RequestError | None:
    """The 400 a signature call's exception is (bytes that are no image the model can decode: TensorFlow's
    InvalidArgumentError), or None for a failure of the model itself."""
    import tensorflow as tf

    from trainer.input_files import op_reason

    if isinstance(exc, tf.errors.InvalidArgumentError):
        return RequestError("instances", f"the model refused them: {op_reason(exc)[:300]}")
    return None


def example_request(signatures: dict[str, Signature]) -> dict[str, Any]:
    """The body of one example request, for the curl line the server prints once it is ready."""
    signature = signatures.get(DEFAULT_SIGNATURE) or next(iter(signatures.values()))
    return {"instances": [example_instance(signature)]}
