"""Checking every record of an image split before training, in two passes over this worker's share of the
files (see :mod:`trainer.sharding`; every worker checks only its own records and the workers combine what
they found with ``Shard.exchange``):

1. :func:`scan_images` parses every record a read batch at a time in parallel tf.data (no Python per
   record): the features, the label (range, one text per label), and the image's format and size from its
   header (:mod:`trainer.models.image_classifier.decoding`), which fixes the image size and what an in-memory
   cache would hold before anything is decoded. A file whose batch fails to parse is re-read record by
   record in Python to name the exact record and reason (:mod:`trainer.models.image_classifier.records`).
2. :func:`load_images` decodes every record once to check it (a JPEG at 1/8 scale, with the same verdict:
   see :func:`trainer.models.image_classifier.decoding.decoded_height`) and keeps no pixels. When the
   preprocessed images fit the cache budget, the training pipeline's first pass over the share decodes them
   as it trains and fills the in-memory cache (:mod:`trainer.models.image_classifier.data`): nothing is
   decoded for it before the first step, in a run that checks the data or one that reuses cached checks
   (:func:`trainer.models.image_classifier.scan.load_cached_scans`).
   ``scan_images(decode=True)`` runs both passes.

A bad record is a one-line :class:`~trainer.input_files.DataError` naming the file and record, or is skipped
and reported while at most ``max_bad_records`` are bad (across all workers). Malformed and mislabelled records
are found by the first pass, undecodable images by the second: with several bad records and no budget the
one named is the first of the earliest pass that found any. Skipped records are left out of the pipeline
by (file, record) key.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from trainer.input_files import DataError, name_files, op_reason
from trainer.models.image_classifier.decoding import (
    GIF,
    MAX_IMAGE_PIXELS,
    decode_pixels,
    decoded_height,
    header_size,
    header_sizes,
)
from trainer.models.image_classifier.records import (
    BAD_LABEL,
    ENCODED,
    KEY_BITS,
    LABEL,
    MAX_CLASSES,
    TEXT,
    UNDECODABLE,
    BadRecord,
    check_example,
    check_framing,
    iterator_reason,
    label_reason,
    plain,
    read_records,
    undecodable,
)
from trainer.models.image_classifier.scan import ImageScan, encoded_batches
from trainer.sharding import UNSHARDED, Shard, untuned

_CHECK_BATCH = 1024  # records the two checking passes read, parse and check together (~15% less CPU than 256)
# A share of at most this many bytes is checked record by record in Python: building and starting the
# parallel pipelines costs ~0.5 s of tracing each, more than checking a few hundred small records.
_SMALL_BYTES = 256 << 10


def _budget_error(bad: list, n_bad: int, max_bad_records: int) -> DataError | None:
    """The error for ``n_bad`` bad records (``bad``: the first ones in file order) beyond the budget."""
    if n_bad <= max_bad_records:
        return None
    hint = (f"more than max_bad_records={max_bad_records} bad records" if max_bad_records
            else "set max_bad_records to skip bad records")
    return DataError(f"{bad[max_bad_records]} ({hint})")


def _exchange(shard: Shard, value: dict) -> list[dict]:
    """``shard.exchange`` of ``value``, then the first worker's error (if any worker had one) raised on every
    worker alike, so that none is left waiting in a later collective."""
    values = shard.exchange(value)
    errors = [v["error"] for v in values if v.get("error")]
    if errors:
        raise DataError(errors[0])
    return values


@dataclass
class _Found:
    """What one worker's first pass found in its share."""

    keys: list = field(default_factory=list)  # int64 arrays of good records
    labels: list = field(default_factory=list)
    hashes: list = field(default_factory=list)
    heights: list = field(default_factory=list)
    widths: list = field(default_factory=list)
    bad: list = field(default_factory=list)  # (key, reason)
    candidates: dict = field(default_factory=dict)  # (label, text hash) -> (first key, text)
    total: int = 0
    read: int = 0

    def add(self, file_index: int, path: str, records, labels, hashes, texts, sizes, pixels, classes,
            channels):
        """One file's (or batch's) parsed records: label range and header checks (``pixels``: what each
        image takes to decode, see :func:`decode_pixels`), vectorised."""
        keys = (np.int64(file_index) << KEY_BITS) + records
        self.read += len(keys)
        bad_label = (labels < 0) | (labels >= (MAX_CLASSES if classes is None else classes))
        empty = ~bad_label & ((sizes[:, 0] <= 0) | (sizes[:, 1] <= 0))
        huge = ~bad_label & ~empty & (pixels > MAX_IMAGE_PIXELS)
        for i in np.flatnonzero(bad_label):
            self.bad.append((int(keys[i]), label_reason(int(labels[i]), classes)))
        for i in np.flatnonzero(empty):
            self.bad.append((int(keys[i]), undecodable(channels)))
        for i in np.flatnonzero(huge):
            self.bad.append((int(keys[i]), UNDECODABLE + f"{sizes[i, 1]}x{sizes[i, 0]} (width x height) "
                             f"takes {int(pixels[i])} pixels to decode, more than the {MAX_IMAGE_PIXELS} an "
                             "image may take"))
        good = ~(bad_label | empty | huge)
        keys, labels, hashes, sizes = keys[good], labels[good], hashes[good], sizes[good]
        texts = np.asarray(texts, dtype=object)[good]
        self.keys.append(keys)
        self.labels.append(labels)
        self.hashes.append(hashes)
        self.heights.append(sizes[:, 0])
        self.widths.append(sizes[:, 1])
        if len(keys):
            _, first = np.unique(np.stack([labels, hashes], axis=1), axis=0, return_index=True)
            for i in first:
                pair = (int(labels[i]), int(hashes[i]))
                if pair not in self.candidates or self.candidates[pair][0] > keys[i]:
                    self.candidates[pair] = (int(keys[i]), bytes(texts[i]))

    def arrays(self):
        def cat(parts, dtype=np.int64):
            return np.concatenate(parts).astype(dtype) if parts else np.zeros(0, dtype)

        order = np.argsort(cat(self.keys), kind="stable")
        return tuple(cat(p)[order] for p in (self.keys, self.labels, self.hashes, self.heights, self.widths))


def _text_hashes(texts):
    import tensorflow as tf

    return tf.strings.to_hash_bucket_fast(texts, 2**62)


def _scan_files(files: Sequence[str], local: Sequence[tuple[int, str]], stride: int, offset: int,
                classes: int | None, channels: int, flag: str) -> tuple[_Found, list[int], int]:
    """First pass over this worker's files: (what it found, records per file, bytes read)."""
    import tensorflow as tf

    if not local:
        return _Found(), [], 0
    sizes = {}
    for index, path in local:
        try:
            sizes[index] = tf.io.gfile.stat(path).length
        except tf.errors.OpError as exc:
            raise DataError(f"{flag + ': ' if flag else ''}cannot read {path}: {op_reason(exc)}") from None
        check_framing(path, sizes[index], flag)
    if sum(sizes.values()) <= _SMALL_BYTES:
        found, counts = _Found(), []
        for index, path in local:
            counts.append(_scan_file_slowly(found, index, path, sizes[index], stride, offset, classes,
                                            channels, flag))
            found.total += counts[-1] if stride == 1 else len(range(offset, counts[-1], stride))
        return found, counts, sum(sizes.values())
    spec = {ENCODED: tf.io.FixedLenFeature([], tf.string), LABEL: tf.io.FixedLenFeature([], tf.int64),
            TEXT: tf.io.FixedLenFeature([], tf.string)}

    def read(path, index):
        return tf.data.TFRecordDataset(path).batch(_CHECK_BATCH).enumerate().map(
            lambda b, raw: (index, b, raw))

    def check(index, batch, raw):
        count = tf.size(raw, out_type=tf.int64)
        nbytes = tf.reduce_sum(tf.cast(tf.strings.length(raw), tf.int64)) + 16 * count
        records = batch * _CHECK_BATCH + tf.range(count, dtype=tf.int64)
        if stride > 1:  # by-record sharding: keep this worker's records before parsing them
            mine = tf.equal(records % stride, offset)
            raw, records = tf.boolean_mask(raw, mine), tf.boolean_mask(records, mine)
        parsed = tf.io.parse_example(raw, spec)
        # GIFs come back whole: their frames are counted in Python (see decode_pixels).
        gif = tf.equal(tf.strings.substr(parsed[ENCODED], 0, len(GIF)), GIF)
        return (index, batch, count, nbytes, records, parsed[LABEL], _text_hashes(parsed[TEXT]), parsed[TEXT],
                header_sizes(parsed[ENCODED]), tf.where(gif)[:, 0], tf.boolean_mask(parsed[ENCODED], gif))

    read, check = plain(read), plain(check)
    # Any failure (a damaged file, a record that does not parse) drops its batch: the bookkeeping below
    # finds the file, which is then checked record by record in Python for the exact record and reason.
    ds = tf.data.Dataset.from_tensor_slices(([p for _, p in local], [i for i, _ in local]))
    ds = ds.interleave(read, cycle_length=max(1, min(len(local), 8)), num_parallel_calls=tf.data.AUTOTUNE,
                       deterministic=False)
    ds = ds.map(check, num_parallel_calls=tf.data.AUTOTUNE, deterministic=False).ignore_errors()
    parts: dict[int, list] = {i: [] for i, _ in local}
    for item in untuned(ds.prefetch(8)).as_numpy_iterator():
        parts[int(item[0])].append(item[1:])
    found = _Found()
    counts, read_bytes = [], 0
    for index, path in local:
        batches = sorted(parts[index], key=lambda p: p[0])
        complete = ([int(p[0]) for p in batches] == list(range(len(batches)))
                    and sum(int(p[2]) for p in batches) == sizes[index])
        if complete:
            records = 0
            for _, count, _, recs, labels, hashes, texts, shape, gif_at, gifs in batches:
                shape = shape.reshape(-1, 2)
                pixels = shape[:, 0].astype(np.float64) * shape[:, 1]  # sides up to 2**32: no int64 overflow
                for i, encoded in zip(gif_at, gifs, strict=True):
                    pixels[i] = decode_pixels(encoded, *map(int, shape[i]))
                found.add(index, path, recs, labels, hashes, texts, shape, pixels, classes, channels)
                records += int(count)
        else:
            records = _scan_file_slowly(found, index, path, sizes[index], stride, offset, classes, channels,
                                        flag)
        counts.append(records)
        found.total += records if stride == 1 else len(range(offset, records, stride))
        read_bytes += sizes[index]
    return found, counts, read_bytes


def _scan_file_slowly(found: _Found, index: int, path: str, size: int, stride: int, offset: int,
                      classes: int | None, channels: int, flag: str) -> int:
    """The first pass over one file in Python, a record at a time: exact reasons (and the damage of a file
    that is not a TFRecord file, as a DataError). Returns the file's record count."""
    rows = []
    count = 0
    for record, raw in enumerate(read_records(path, size, flag)):
        count += 1
        if record % stride != offset:
            continue
        reason, label, encoded, text = check_example(raw, classes)
        if reason is not None:
            found.bad.append(((index << KEY_BITS) + record, reason))
            found.read += 1
            continue
        height, width = header_size(encoded)
        rows.append((record, label, text, (height, width), float(decode_pixels(encoded, height, width))))
    if rows:
        records = np.array([r[0] for r in rows], np.int64)
        labels = np.array([r[1] for r in rows], np.int64)
        texts = [r[2] for r in rows]
        hashes = _text_hashes(texts).numpy()
        sizes = np.array([r[3] for r in rows], np.int64)
        found.add(index, path, records, labels, hashes, texts, sizes, np.array([r[4] for r in rows]), classes,
                  channels)
    return count


def _where(files: Sequence[str], key: int) -> tuple[str, int]:
    return files[key >> KEY_BITS], key & ((1 << KEY_BITS) - 1)


def _bad(files: Sequence[str], key: int, reason: str) -> BadRecord:
    path, record = _where(files, key)
    return BadRecord(path, record, reason)


def _merged_bad(files: Sequence[str], values: list[dict]) -> tuple[list[tuple[int, str]], int]:
    entries = sorted((int(k), r) for v in values for k, r in v["bad"])
    return entries, sum(v["n_bad"] for v in values)


def scan_images(files: Sequence[str], *, channels: int = 3, num_classes: int | None = None,
                class_names: Sequence[str] | None = None, max_bad_records: int = 0,
                flag: str = "", shard: Shard = UNSHARDED, decode: bool = True) -> ImageScan:
    """Check every record of this worker's share of ``files``; raise DataError at the first bad record
    beyond ``max_bad_records`` (counted over all workers).

    ``files`` is the whole split; this worker reads the files ``shard.files`` deals it (or, with fewer
    files than workers, all files, keeping every ``shard.count``-th record before parsing it). The classes
    come from ``class_names`` (their number fixes the label range), else ``num_classes`` (names from the
    records' text), else the data: labels must then cover 0..max without gaps. One label with two different
    texts is a bad label (the text of the label's first record in file order wins). ``channels`` is the
    decode the pipeline will use (1 or 3). ``decode=False`` stops after the first pass (headers only);
    :func:`load_images` must then decode before training.
    """
    if channels not in (1, 3):
        raise ValueError(f"channels must be 1 or 3, not {channels}")
    if class_names is not None:
        if num_classes is not None and num_classes != len(class_names):
            raise ValueError(f"num_classes {num_classes} != {len(class_names)} class names")
        num_classes = len(class_names)
    files = tuple(files)
    mine, by_record = shard.files(files, flag)
    mine = set(mine)  # once: a set per file would make this quadratic in the number of files
    local = [(i, f) for i, f in enumerate(files) if f in mine]
    stride, offset = (shard.count, shard.index) if by_record else (1, 0)

    value: dict = {"error": None}
    try:
        found, file_records, read_bytes = _scan_files(files, local, stride, offset, num_classes, channels,
                                                      flag)
    except DataError as exc:
        found, file_records, read_bytes = _Found(), [0] * len(local), 0
        value["error"] = str(exc)
    keys, labels, hashes, heights, widths = found.arrays()
    found.bad.sort()
    value.update(
        bad=found.bad[:max_bad_records + 1], n_bad=len(found.bad), total=found.total,
        bytes=read_bytes if stride == 1 or offset == 0 else 0,
        counts={str(k): int(v) for k, v in zip(*np.unique(labels, return_counts=True), strict=True)},
        sizes=[int(heights.min()), int(widths.min()), int(heights.max()), int(widths.max())] if len(keys)
        else None,
        candidates=[[label, str(h), key, text.decode("latin-1")]
                    for (label, h), (key, text) in found.candidates.items()])
    values = _exchange(shard, value)
    bad, n_bad = _merged_bad(files, values)
    error = _budget_error([_bad(files, k, r) for k, r in bad], n_bad, max_bad_records)
    if error:
        raise error

    # The text of each label is its first record's, in file order over all workers.
    canonical: dict[int, tuple[int, int, bytes]] = {}  # label -> (key, hash, text)
    for v in values:
        for label, h, key, text in v["candidates"]:
            if label not in canonical or key < canonical[label][0]:
                canonical[label] = (key, int(h), text.encode("latin-1"))
    counts: dict[int, int] = {}
    for v in values:
        for label, n in v["counts"].items():
            counts[int(label)] = counts.get(int(label), 0) + n
    # This worker's records whose text differs from their label's: bad labels, reported after decoding.
    pending = []
    if len(keys):
        unique, inverse = np.unique(labels, return_inverse=True)
        expected = np.array([canonical[int(label)][1] for label in unique], np.int64)
        for i in np.flatnonzero(expected[inverse] != hashes):
            label = int(labels[i])
            text = found.candidates[(label, int(hashes[i]))][1]
            first_key, _, first = canonical[label]
            path, record = _where(files, first_key)
            pending.append((int(keys[i]), label, BAD_LABEL + f"text {text.decode(errors='replace')!r} for "
                            f"label {label}, but {first.decode(errors='replace')!r} at {path}: "
                            f"record {record}"))
    where = f"{flag + ': ' if flag else ''}{name_files(files)}"
    records = sum(counts.values())
    if records == 0:
        raise DataError(f"{where}: no usable records")
    if class_names is None:
        if num_classes is None:
            num_classes = max(counts) + 1
            missing = sorted(set(range(num_classes)) - set(counts))
            if missing:
                raise DataError(f"{where}: no records with label(s) {', '.join(map(str, missing[:10]))} "
                                f"of 0..{num_classes - 1}: pass the class names or the number of classes")
        class_names = [canonical[i][2].decode(errors="replace") if i in canonical else str(i)
                       for i in range(num_classes)]
    sizes = [v["sizes"] for v in values if v["sizes"]]
    pending_keys = np.array(sorted(k for k, _, _ in pending), np.int64)
    scan = ImageScan(
        files=files, records=records, total_records=sum(v["total"] for v in values),
        total_bytes=sum(v["bytes"] for v in values), class_names=tuple(class_names),
        class_counts=tuple(counts.get(i, 0) for i in range(num_classes)),
        excluded=np.union1d(np.array([k for k, _ in found.bad], np.int64), pending_keys),
        bad_records=tuple(_bad(files, k, r) for k, r in bad),
        min_size=(min(s[0] for s in sizes), min(s[1] for s in sizes)),
        max_size=(max(s[2] for s in sizes), max(s[3] for s in sizes)),
        file_indices=tuple(i for i, _ in local), stride=stride, offset=offset,
        file_records=tuple(file_records), local_records=len(keys) - len(pending), records_read=found.read,
        pending=tuple(pending), good_keys=np.setdiff1d(keys, pending_keys),
    )
    if decode:
        scan = load_images(scan, channels=channels, shard=shard, max_bad_records=max_bad_records)
    return scan


def load_images(scan: ImageScan, *, channels: int, shard: Shard = UNSHARDED,
                max_bad_records: int = 0) -> ImageScan:
    """Second pass: decode every good record of this worker's share once, in parallel, to check that it
    decodes (no pixels are kept; the in-memory cache is filled by training's first pass, see
    :func:`trainer.models.image_classifier.data.image_dataset`); the final scan.

    Undecodable records and the first pass's text conflicts count against ``max_bad_records`` together with
    the first pass's bad records (over all workers); the one-line DataError names the first beyond it in
    file order.
    """
    import tensorflow as tf

    pending, good = scan.pending, scan.good_keys
    value: dict = {"error": None}
    undecodable: list[tuple[int, int, str]] = []
    try:
        if good is None:
            raise ValueError("load_images needs a scan from scan_images")
        if scan.total_bytes <= _SMALL_BYTES:  # see _SMALL_BYTES
            undecodable = _check_decodes(scan, np.setdiff1d(good, scan.excluded), channels)[0]
        else:
            undecodable = _decode_share(scan, good, channels)
    except DataError as exc:
        value["error"] = str(exc)
    except tf.errors.OpError as exc:
        value["error"] = f"cannot read {name_files(scan.files)}: {iterator_reason(exc)}"
    bad = sorted([(k, r) for k, _, r in (*pending, *undecodable)])
    removed: dict[str, int] = {}
    for _, label, _ in (*pending, *undecodable):
        removed[str(label)] = removed.get(str(label), 0) + 1
    value.update(bad=bad[:max_bad_records + 1], n_bad=len(bad), removed=removed,
                 records=int(len(good) - len(undecodable)) if good is not None else 0)
    values = _exchange(shard, value)
    later, n_later = _merged_bad(scan.files, values)
    first = [(int(_key(scan.files, b)), b.reason) for b in scan.bad_records]
    every = sorted(first + later)
    error = _budget_error([_bad(scan.files, k, r) for k, r in every], len(scan.bad_records) + n_later,
                          max_bad_records)
    if error:
        raise error
    counts = list(scan.class_counts)
    for v in values:
        for label, n in v["removed"].items():
            if int(label) < len(counts):
                counts[int(label)] -= n
    records = scan.records - sum(sum(v["removed"].values()) for v in values)
    if records <= 0:
        raise DataError(f"{name_files(scan.files)}: no usable records")
    final = replace(scan, records=records, class_counts=tuple(counts),
                    excluded=np.union1d(scan.excluded, np.array([k for k, _, _ in undecodable], np.int64)),
                    bad_records=tuple(_bad(scan.files, k, r) for k, r in every),
                    local_records=value["records"], decoded=True, pending=(),
                    good_keys=np.setdiff1d(good, np.array([k for k, _, _ in undecodable], np.int64)))
    return final


def _decode_share(scan: ImageScan, good: np.ndarray, channels: int) -> list[tuple[int, int, str]]:
    """The second pass in parallel tf.data: the undecodable records, [(key, label, reason)]."""
    wanted = np.setdiff1d(good, scan.excluded)
    keys = [k for k, _ in untuned(_decoded(scan, channels).prefetch(4)).as_numpy_iterator()]
    missing = np.setdiff1d(wanted, np.concatenate(keys) if keys else np.zeros(0, np.int64))
    undecodable = []
    if len(missing):
        # A batch whose decode failed was dropped: check its records one by one. Each must decode or fail
        # there; one that does neither was not found in its file (the pass above and this one disagree).
        undecodable, decoded = _check_decodes(scan, missing, channels)
        if decoded + len(undecodable) != len(missing):
            raise AssertionError("a record neither decoded nor failed")
    return undecodable


def _key(files: Sequence[str], bad: BadRecord) -> int:
    return (files.index(bad.file) << KEY_BITS) + bad.record


def _decoded(scan: ImageScan, channels: int):
    """Batches of (keys, heights) from the second pass; a record or batch whose decode fails is dropped (the
    caller finds its records by key).

    Small images (MNIST) are decoded a batch at a time in a loop (a tf.data element per image costs more
    than decoding it); photos one per element, in parallel: their decode dwarfs the per-element cost, and a
    loop over a batch would decode its images one after the other (2000 flowers-sized JPEGs: 3.6x the wall
    time on two cores).
    """
    import tensorflow as tf

    # The JPEG test costs more than a small image's decode saves: photos only.
    height = decoded_height(channels, scaled=scan.photos)

    def body(keys, encoded, labels):
        return keys, tf.map_fn(height, encoded, fn_output_signature=tf.TensorSpec([], tf.int32),
                               parallel_iterations=16)

    ds = encoded_batches(scan, deterministic=True, batch=_CHECK_BATCH)
    if scan.photos:

        def one(key, encoded, label):
            return key, height(encoded)

        ds = ds.unbatch().map(plain(one), num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        return ds.ignore_errors().batch(_CHECK_BATCH)
    return ds.map(plain(body), num_parallel_calls=tf.data.AUTOTUNE, deterministic=True).ignore_errors()


def _check_decodes(scan: ImageScan, missing: np.ndarray, channels: int) -> tuple[list, int]:
    """The second pass for ``missing`` records, one at a time in Python: ([(key, label, reason)] of those
    that do not decode, how many do)."""
    import tensorflow as tf

    height = decoded_height(channels, exact=True, scaled=True)
    bad, decoded = [], 0
    for index in sorted(set((missing >> KEY_BITS).tolist())):
        path = scan.files[index]
        records = missing[(missing >> KEY_BITS) == index] & ((1 << KEY_BITS) - 1)
        lo, hi = int(records.min()), int(records.max())
        wanted = set(records.tolist())
        ds = tf.data.TFRecordDataset(path).skip(lo).take(hi - lo + 1)
        for record, raw in enumerate(ds.as_numpy_iterator(), start=lo):
            if record not in wanted:
                continue
            _, label, encoded, _ = check_example(raw, None)
            try:
                height(tf.constant(encoded)).numpy()
                decoded += 1
            except (tf.errors.OpError, ValueError):
                bad.append(((index << KEY_BITS) + record, label, undecodable(channels)))
    return bad, decoded
