"""The streaming tf.data pipeline of scanned delimited text (:func:`text_dataset`).

It reads the lines :func:`trainer.csv_scan.scan_csv` checked with ``TextLineDataset``, batches them first and
decodes whole batches with ``decode_csv`` in a parallel map: the lines to leave out (comments, blank lines,
skipped bad rows: the scan's ``excluded``) are removed per batch by their global line number, a vectorised
lookup, so no per-line Python or per-element tf.data work is done.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np

from trainer.csv_scan import ScanResult
from trainer.csv_schema import CsvSchema
from trainer.sharding import PREFETCH_BATCHES, dataset_options

# Batches the training pipeline shuffles among (it reorders whole batches; see text_dataset).
SHUFFLE_BATCHES = 16


def bytes_per_row(element_spec) -> int:
    """Memory one row of a batched dataset's elements takes (strings counted at 64 bytes)."""
    import tensorflow as tf

    total = 0
    for spec in tf.nest.flatten(element_spec):
        size = 64 if spec.dtype == tf.string else spec.dtype.size
        total += size * int(np.prod([d or 1 for d in spec.shape[1:]]))
    return total


def decode_csv_batch(lines, schema: CsvSchema):
    """Decode a batch of raw lines into (features dict, float label) tensors; strings are stripped."""
    import tensorflow as tf

    dtypes = {"int": tf.int64, "float": tf.float32, "str": tf.string}
    defaults = [tf.constant([], dtype=dtypes[c.kind]) for c in schema.columns]
    fields = tf.io.decode_csv(lines, record_defaults=defaults, field_delim=schema.delimiter)
    features = {}
    for column, value in zip(schema.columns, fields, strict=True):
        features[column.name] = tf.strings.strip(value) if column.kind == "str" else value
    raw_label = features.pop(schema.label)
    if schema.label_suffix:
        raw_label = tf.strings.regex_replace(raw_label, re.escape(schema.label_suffix) + "$", "")
    label = tf.zeros_like(raw_label, dtype=tf.float32)
    for value in schema.positive:
        label = tf.where(tf.equal(raw_label, value), 1.0, label)
    return features, label


def _kept_per_batch(scan: ScanResult, batch_lines: int, keep: tuple[int, int]) -> np.ndarray:
    """Data rows each batch of ``batch_lines`` lines delivers: its lines of this share (every line, or with
    ``keep=(i, n)`` those at positions i modulo n), less the excluded ones."""
    index_of, count_of = keep
    n = -(-scan.total_lines // batch_lines)
    edges = np.minimum(np.arange(n + 1, dtype=np.int64) * batch_lines, scan.total_lines)
    below = (edges - index_of + count_of - 1) // count_of  # lines before each edge at i modulo n
    return np.diff(below) - np.bincount(scan.excluded // batch_lines, minlength=n)


def count_batches(scan: ScanResult, batch_size: int) -> int:
    """Batches an unsharded text_dataset yields per pass: line batches that keep at least one data row."""
    return int(np.count_nonzero(_kept_per_batch(scan, batch_size, (0, 1)) > 0))


def text_dataset(scan: ScanResult, schema: CsvSchema, *, batch_size: int,
                 transform: Callable | None = None, cache: bool | int = False, shuffle: bool = False,
                 seed: int = 0, repeat: bool = False, keep: tuple[int, int] = (0, 1), sharded: bool = False):
    """The streaming pipeline: TextLineDataset -> batch -> (drop excluded lines, decode, transform) ->
    in-memory cache.

    ``transform(features, label)`` runs inside the parallel map (the task's preprocessing), so with
    ``cache`` both parsing and preprocessing happen once and later epochs read ready tensors (``cache`` as a
    number of bytes: only when the preprocessed rows take at most that much memory). Shuffling
    reorders whole batches: per-example shuffling would cost per-element tf.data work on every epoch.
    ``keep=(i, n)``: this worker's share by record (trainer.sharding): batches of ``n * batch_size`` lines of
    which only those at positions i modulo n are decoded, so batches stay about ``batch_size`` rows.
    ``sharded``: one of several workers' shares, whose length the pipeline does not claim: tf.distribute
    splits each batch among the workers, so a worker takes more steps than its share has batches, and Keras
    would stop evaluating after the claimed number.
    """
    import tensorflow as tf

    index_of, count_of = keep
    lines_per_batch = batch_size * count_of
    excluded = tf.constant(scan.excluded, dtype=tf.int64)
    has_excluded = bool(scan.excluded.size)
    delivers = _kept_per_batch(scan, lines_per_batch, keep) > 0

    def parse(batch_index, lines):
        start = batch_index * lines_per_batch
        index = start + tf.range(tf.size(lines, out_type=tf.int64), dtype=tf.int64)
        if count_of > 1:
            lines, index = (tf.boolean_mask(t, tf.equal(index % count_of, index_of)) for t in (lines, index))
        if has_excluded:
            pos = tf.searchsorted(excluded, index, out_type=tf.int64)
            hit = tf.gather(excluded, tf.minimum(pos, tf.size(excluded, out_type=tf.int64) - 1))
            lines = tf.boolean_mask(lines, tf.not_equal(hit, index))
        features, label = decode_csv_batch(lines, schema)
        if transform is not None:
            return transform(features, label)
        return features, label

    ds = tf.data.TextLineDataset(list(scan.files)).batch(lines_per_batch).enumerate()
    if not delivers.all():
        # A batch of only excluded lines (a banner and a blank line, or comments) is dropped before it is
        # decoded: the preprocessing's layers refuse empty batches.
        table = tf.constant(delivers)
        ds = ds.filter(lambda batch_index, _: table[batch_index])
    ds = ds.map(parse, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    if not sharded:
        ds = ds.apply(tf.data.experimental.assert_cardinality(int(delivers.sum())))
    if cache is not True and cache is not False:
        cache = scan.rows * bytes_per_row(ds.element_spec) <= cache
    if cache:
        ds = ds.cache()
    if shuffle:
        # A bounded buffer: a whole-dataset one would make the first epoch parse everything before the first
        # training step instead of overlapping the two.
        ds = ds.shuffle(SHUFFLE_BATCHES, seed=seed, reshuffle_each_iteration=True)
    if repeat:
        ds = ds.repeat()
    return ds.with_options(dataset_options(shuffle)).prefetch(PREFETCH_BATCHES)
