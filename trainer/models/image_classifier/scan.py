"""What the checks found in one split (:class:`ImageScan`: counts, classes, sizes, bad records, this worker's
share), how the share's good records are read back by key, and how a checked scan is cached on disk for the
job's other trials and restarts (:mod:`trainer.result_cache`).
"""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from trainer import result_cache
from trainer.models.image_classifier.records import (
    BAD_LABEL,
    ENCODED,
    KEY_BITS,
    LABEL,
    READ_BATCH,
    UNDECODABLE,
    BadRecord,
    plain,
)

# Records larger than this on average are photos, decoded one per tf.data element (see ImageScan.photos).
_PHOTO_BYTES = 8 << 10


@dataclass(frozen=True)
class ImageScan:
    files: tuple[str, ...]  # the whole split's files (every worker's)
    records: int  # good records of all workers: what one epoch delivers across the cluster
    total_records: int  # every record in the files, bad ones included
    total_bytes: int
    class_names: tuple[str, ...]
    class_counts: tuple[int, ...]  # good records per class
    excluded: np.ndarray  # sorted int64 keys (file_index << 40 | record) of this worker's skipped records
    bad_records: tuple[BadRecord, ...] = ()  # every worker's, in file order
    min_size: tuple[int, int] = (0, 0)  # smallest (height, width) seen
    max_size: tuple[int, int] = (0, 0)
    # This worker's share: the files it reads (indices into ``files``), and in by-record sharding the
    # records it keeps (record % stride == offset, decided before parsing).
    file_indices: tuple[int, ...] | None = None  # None: all
    stride: int = 1
    offset: int = 0
    file_records: tuple[int, ...] = ()  # records in each of this worker's files
    local_records: int | None = None  # good records in this worker's share (None: all of them)
    records_read: int = 0  # records this worker parsed and checked (its share)
    decoded: bool = False  # every good record's image decoded (load_images ran)
    # Between the passes: this worker's good keys, and its text conflicts still to be reported.
    good_keys: np.ndarray | None = field(default=None, repr=False, compare=False)
    pending: tuple = field(default=(), repr=False, compare=False)

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    @property
    def share_records(self) -> int:
        return self.records if self.local_records is None else self.local_records

    @property
    def local_files(self) -> tuple[tuple[int, str], ...]:
        indices = range(len(self.files)) if self.file_indices is None else self.file_indices
        return tuple((i, self.files[i]) for i in indices)

    @property
    def photos(self) -> bool:
        """Whether the records are photos: each decode dwarfs a tf.data element's cost, so the passes decode
        them one per element, in parallel, not a batch at a time in a loop."""
        return self.total_bytes > _PHOTO_BYTES * max(1, self.total_records)

    def held_bytes(self, image_size: int, channels: int) -> int:
        """Memory this worker's in-memory cache of preprocessed images takes: uint8 pixels when every image
        already has the model's size (nothing to resize: the in-memory cache holds the decoded bytes and
        scales per batch), else the resized float32 images."""
        same = self.min_size == self.max_size == (image_size, image_size)
        return self.share_records * image_size * image_size * channels * (1 if same else 4)

    def bad_counts(self) -> dict[str, int]:
        counts = {"malformed": 0, "label": 0, "undecodable": 0}
        for bad in self.bad_records:
            key = ("label" if bad.reason.startswith(BAD_LABEL) else
                   "undecodable" if bad.reason.startswith(UNDECODABLE) else "malformed")
            counts[key] += 1
        return counts

    def share(self) -> dict:
        """This worker's share, for the report and the log."""
        return {"files": len(self.local_files), "of_files": len(self.files), "records": self.share_records,
                "of_records": self.records, "records_read": self.records_read,
                "by_record": self.stride > 1}

    def summary(self) -> str:
        text = f"{self.records} images in {self.num_classes} classes from {len(self.files)} file(s)"
        if self.bad_records:
            shown = "; ".join(str(b) for b in self.bad_records[:3])
            more = f" (+{len(self.bad_records) - 3} more)" if len(self.bad_records) > 3 else ""
            counts = ", ".join(f"{n} {k}" for k, n in self.bad_counts().items() if n)
            text += f", skipped {len(self.bad_records)} bad record(s) ({counts}): {shown}{more}"
        return text


# Cached scans (trainer.result_cache): a study's trials and a restarted worker reuse the checked scans of the
# same files and flags instead of reading and decoding every record again.
_CACHE_FORMAT = 1  # bump when what a scan checks or caches changes: older cached scans are then not read
_MAX_CACHED_BYTES = 1 << 30
_SCAN_FIELDS = ("records", "total_records", "total_bytes", "class_names", "class_counts", "min_size",
                "max_size", "file_indices", "stride", "offset", "file_records", "local_records",
                "records_read")


def cached_scans_path(folder: str | None, splits: Sequence[Sequence[str]], depends: list) -> str | None:
    """Where this worker's checked scans of ``splits`` (each a list of files) are cached, for ``depends``
    (the flags the checks depend on and the worker's share); None when there is no place or a file cannot
    be stat'ed (the scans are then simply not cached)."""
    import tensorflow as tf

    if not folder:
        return None
    try:
        identity = [result_cache.files_identity(files) for files in splits]
    except tf.errors.OpError:
        return None
    return f"{folder}/images-{result_cache.key(_CACHE_FORMAT, identity, repr(depends))}.npz"


def load_cached_scans(path: str | None, splits: Sequence[Sequence[str]], *,
                      claim: bool = False) -> list[ImageScan] | None:
    """The scans :func:`cache_scans` cached at ``path`` (decoded: nothing left to check), or None (with
    ``claim``, a miss is claimed: another trial checking the same files is waited for, see
    trainer.result_cache)."""
    raw = result_cache.read(path, _MAX_CACHED_BYTES, "image scans", claim=claim) if path else None
    if raw is None:
        return None
    try:
        arrays = np.load(io.BytesIO(raw), allow_pickle=False)
        metas = json.loads(arrays["meta"].tobytes())
        scans = []
        for i, (files, meta) in enumerate(zip(splits, metas, strict=True)):
            values = {name: tuple(v) if isinstance(v, list) else v for name, v in meta["fields"].items()}
            scans.append(ImageScan(
                files=tuple(files), excluded=arrays[f"excluded_{i}"], good_keys=arrays[f"good_{i}"],
                bad_records=tuple(BadRecord(*b) for b in meta["bad_records"]), decoded=True, **values))
        return scans
    except result_cache.DECODE_ERRORS as exc:
        logging.getLogger("trainer").warning("not reading the cached image scans %s (%s): checking the data",
                                             path, exc)
        return None


def cache_scans(path: str | None, scans: Sequence[ImageScan]) -> None:
    """Cache the decoded (fully checked) ``scans`` at ``path`` for the job's later trials and restarts."""
    if not path:
        return
    metas, arrays = [], {}
    for i, scan in enumerate(scans):
        metas.append({"fields": {name: getattr(scan, name) for name in _SCAN_FIELDS},
                      "bad_records": [[b.file, b.record, b.reason] for b in scan.bad_records]})
        arrays[f"excluded_{i}"], arrays[f"good_{i}"] = scan.excluded, scan.good_keys
    buffer = io.BytesIO()
    np.savez(buffer, meta=np.frombuffer(json.dumps(metas).encode(), np.uint8), **arrays)
    result_cache.write(path, buffer.getvalue(), "image scans")


def encoded_batches(scan: ImageScan, *, shuffle_files: bool = False, seed: int = 0, in_order: bool = False,
                    deterministic: bool = True, batch: int = READ_BATCH):
    """Batches of (int64 keys, encoded images, int32 labels) of this worker's good records: its files read in
    parallel (interleaved a read batch at a time, in a fixed order unless shuffling), or one after the other
    with ``in_order``. Records of other workers (by-record sharding) and skipped ones are dropped before
    parsing, a whole read batch at a time (vectorized: per-record parsing would cost more than decoding an
    MNIST image)."""
    import tensorflow as tf

    spec = {ENCODED: tf.io.FixedLenFeature([], tf.string), LABEL: tf.io.FixedLenFeature([], tf.int64)}
    excluded = tf.constant(scan.excluded if scan.excluded.size else np.array([-1], np.int64))
    local = scan.local_files
    stride, offset = scan.stride, scan.offset

    def read(path, file_index):
        return tf.data.TFRecordDataset(path).batch(batch).enumerate().map(
            lambda b, raw: (tf.bitwise.left_shift(file_index, KEY_BITS) + b * batch, raw))

    def parse(first_key, raw):
        keys = first_key + tf.range(tf.size(raw, out_type=tf.int64), dtype=tf.int64)
        keep = tf.ones_like(keys, tf.bool)
        if stride > 1:
            keep = tf.equal(tf.bitwise.bitwise_and(keys, (1 << KEY_BITS) - 1) % stride, offset)
        if scan.excluded.size:  # before parsing: a skipped record may not parse at all
            pos = tf.minimum(tf.searchsorted(excluded, keys), tf.size(excluded) - 1)
            keep = tf.logical_and(keep, tf.not_equal(tf.gather(excluded, pos), keys))
        raw, keys = tf.boolean_mask(raw, keep), tf.boolean_mask(keys, keep)
        parsed = tf.io.parse_example(raw, spec)
        return keys, parsed[ENCODED], tf.cast(parsed[LABEL], tf.int32)

    read, parse = plain(read), plain(parse)
    files = tf.data.Dataset.from_tensor_slices(([p for _, p in local],
                                                tf.constant([i for i, _ in local], tf.int64)))
    if shuffle_files:
        files = files.shuffle(len(local), seed=seed, reshuffle_each_iteration=True)
    ds = files.interleave(read, cycle_length=1 if in_order else max(1, min(len(local), 8)),
                          num_parallel_calls=tf.data.AUTOTUNE, deterministic=deterministic)
    return ds.map(parse, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


def encoded_records(scan: ImageScan, *, shuffle_files: bool, seed: int, in_order: bool = False):
    """(encoded image, int32 label) of this worker's good records (see :func:`encoded_batches`)."""
    ds = encoded_batches(scan, shuffle_files=shuffle_files, seed=seed, in_order=in_order,
                         deterministic=not shuffle_files)
    return ds.map(lambda keys, encoded, labels: (encoded, labels)).unbatch()
