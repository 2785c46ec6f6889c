"""What the recommender caches for the job's later trials and restarts (:mod:`trainer.result_cache`):
popularity's and EASE's figures (:func:`cached_baselines`) and the model's item-item weights
(:func:`cached_item_item`), each computed once a study for the same files and flags.
"""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Callable

import numpy as np

from trainer import result_cache

log = logging.getLogger("trainer")

_BASELINES_FORMAT = 1  # bump when what the baselines compute changes: older cached figures are then not read
_ITEM_ITEM_FORMAT = 1  # likewise for the item-item weights


def cached_baselines(folder: str | None, files: list[str], depends: list, compute, *,
                     claim: bool = False) -> tuple[dict, Callable | None]:
    """(``compute()``: popularity's and EASE's figures, and what caches them in ``folder``
    (trainer.result_cache) for the job's later trials and restarts), or (the figures a run before this one
    cached for the same files and flags, None): EASE inverts an items x items matrix (over a minute and GBs
    on the shipped data), and a study pays for it once. ``claim``: a trial computing the same figures now is
    waited for (trainer.result_cache's claims)."""

    def decode(raw: bytes):
        figures = json.loads(raw)
        return figures if isinstance(figures, dict) else None

    return _cached(folder, "baselines.json", "baselines", [_BASELINES_FORMAT, depends], files, 1 << 20,
                   decode, lambda figures: json.dumps(figures).encode(), compute, claim)


def cached_item_item(folder: str | None, files: list[str], depends: list, num_items: int, compute, *,
                     claim: bool = False) -> tuple:
    """The model's item-item weights ``[items + 1, items + 1]`` float32, as :func:`cached_baselines` caches
    the baselines' figures: the inverse is the slowest part of a run on the shipped data."""
    shape = (num_items + 1, num_items + 1)

    def decode(raw: bytes):
        weights = np.load(io.BytesIO(raw), allow_pickle=False)  # a damaged file raises: computed again
        valid = isinstance(weights, np.ndarray) and weights.shape == shape and weights.dtype == np.float32
        return weights if valid else None

    def encode(weights) -> bytes:
        out = io.BytesIO()
        np.save(out, weights, allow_pickle=False)
        return out.getvalue()

    return _cached(folder, "item-item.npy", "item-item weights", [_ITEM_ITEM_FORMAT, depends], files,
                   shape[0] * shape[1] * 4 + 4096, decode, encode, compute, claim)


def _cached(folder, name: str, what: str, version: list, files: list[str], max_bytes: int, decode, encode,
            compute, claim: bool) -> tuple:
    """(``compute()``, a callable that caches it) or (the value cached for the same files and ``version``
    ([format, what it depends on]), None). ``name`` is the cached file's (``prefix.suffix``; the key goes
    between); ``decode`` returns None (or raises one of ``trainer.result_cache.DECODE_ERRORS``) for cached
    bytes that are not a valid value; ``claim``: a miss is claimed until it is cached
    (trainer.result_cache.read)."""
    import tensorflow as tf

    if not folder:
        return compute(), None
    try:
        identity = result_cache.files_identity(files)
    except tf.errors.OpError:
        return compute(), None
    prefix, suffix = name.rsplit(".", 1)
    fmt, depends = version
    path = f"{folder}/{prefix}-{result_cache.key(fmt, identity, repr(depends))}.{suffix}"
    raw = result_cache.read(path, max_bytes, what, claim=claim)
    if raw is not None:
        try:
            value = decode(raw)
        except result_cache.DECODE_ERRORS:
            value = None
        if value is not None:
            log.info("%s: read from %s", what, path)
            return value, None
        log.warning("not reading the cached %s %s: computing them again", what, path)
    value = compute()
    return value, lambda: result_cache.write(path, encode(value), what)
