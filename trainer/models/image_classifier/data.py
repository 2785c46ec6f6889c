"""Image classification pipelines: batches of preprocessed images and labels from this worker's share of a
checked split (:func:`image_dataset`; see :mod:`trainer.models.image_classifier.checks`), cached in memory as
the first pass reads them when they fit, plus an in-memory variant with the same preprocessing
(:func:`read_arrays`, :func:`array_dataset`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from trainer.input_files import DataError, cache_budget
from trainer.models.image_classifier import decoding
from trainer.models.image_classifier.records import READ_BATCH, plain
from trainer.models.image_classifier.scan import ImageScan, encoded_batches, encoded_records
from trainer.sharding import PREFETCH_BATCHES, dataset_options

AUGMENTATIONS = ("flip", "crop")
_FILL_BYTES = 4 << 20  # decoded bytes a batch of the cache's filling pass holds at most (see _filling_cache)


def _augmenter(augment: Sequence[str], image_size: int, seed: int):
    """A per-image map: random left-right flip and/or a random crop of 80-100% of the side, resized back."""
    import tensorflow as tf

    unknown = set(augment) - set(AUGMENTATIONS)
    if unknown:
        raise ValueError(f"unknown augmentation(s) {sorted(unknown)}; choose from {', '.join(AUGMENTATIONS)}")

    def apply(image, label):
        if "flip" in augment:
            image = tf.image.random_flip_left_right(image, seed=seed)
        if "crop" in augment:
            side = tf.cast(tf.random.uniform([], 0.8, 1.0, seed=seed + 1) * image_size, tf.int32)
            image = tf.image.random_crop(image, tf.stack([side, side, tf.shape(image)[-1]]), seed=seed + 2)
            image = tf.image.resize(image, [image_size, image_size])
        return image, label

    return apply


def _finalize(ds, *, batch_size: int, shuffle: bool, buffer: int, seed: int, augment, image_size: int,
              drop_remainder: bool, repeat: bool, deterministic: bool = True):
    import tensorflow as tf

    if shuffle:
        ds = ds.shuffle(buffer, seed=seed, reshuffle_each_iteration=True)
    if augment:
        ds = ds.map(_augmenter(augment, image_size, seed), num_parallel_calls=tf.data.AUTOTUNE)
    if repeat:
        ds = ds.repeat()
    ds = ds.batch(batch_size, drop_remainder=drop_remainder, num_parallel_calls=tf.data.AUTOTUNE)
    return _options(ds, deterministic)


def _options(ds, deterministic: bool):
    # Each worker reads its own share (trainer.sharding): tf.data's auto-sharding is off. A seeded shuffle
    # repeats exactly; only streaming (uncached) training trades that for throughput.
    return ds.with_options(dataset_options(shuffle=not deterministic)).prefetch(PREFETCH_BATCHES)


def _cached_dataset(indices, images, labels, *, batch_size: int, seed: int, augment, image_size: int,
                    scale: str, drop_remainder: bool, repeat: bool):
    """Batches gathered from the share's images held in a variable, as :func:`_filling_cache` gives them
    (``indices``: the positions to gather, in the pass's order; it shuffles them in training): a batch is
    one gather, so nothing is done per image (a per-image tf.data cache costs ~20 us an image, more than the
    CNN's step on MNIST, and its full-share shuffle buffer must fill before the first step). Augmentation
    works per image and takes the per-image path."""
    import tensorflow as tf

    def gather(index):
        return decoding.finish(tf.gather(images, index), image_size, scale), tf.gather(labels, index)

    ds = indices
    if augment:
        ds = ds.map(gather, num_parallel_calls=tf.data.AUTOTUNE)
        return _finalize(ds, batch_size=batch_size, shuffle=False, buffer=0, seed=seed, augment=augment,
                         image_size=image_size, drop_remainder=drop_remainder, repeat=repeat)
    if repeat:
        ds = ds.repeat()
    ds = ds.batch(batch_size, drop_remainder=drop_remainder).map(gather, num_parallel_calls=tf.data.AUTOTUNE)
    return _options(ds, deterministic=True)


def _filling_cache(scan: ImageScan, *, channels: int, image_size: int, training: bool, seed: int,
                   shuffle_buffer: int):
    """The share's cache, filled by the first pass over the share instead of before it: (a dataset of the
    positions to gather, the images variable, the labels variable) for :func:`_cached_dataset`.

    The cache holds each good record's image decoded with ``decoding.decode`` and, where it is not already
    ``image_size`` square, resized to it as ``decoding.finish`` resizes (bilinear, no antialiasing): uint8
    when every image's header gives that size (:meth:`ImageScan.held_bytes`; one that decodes to another size
    is resized and rounded), else float32 0..255; :func:`_cached_dataset` scales per batch. Every pass starts
    by asking whether every position was written. Until then a pass reads the records (files shuffled,
    ``shuffle_buffer`` encoded records shuffled, in training), decodes them in parallel, writes each image and
    label at its record's position in the share (its key's rank, i.e. file order) and yields that position;
    once every position was written, a pass gathers from memory (in a full-share shuffle, in training). A pass
    cut short (a run of fewer steps than a pass, a restart) leaves the cache partly written: the next pass
    reads the files again. The scan's second pass (this run's or a cached one's) has checked that every record
    decodes, so none fails here.
    """
    import tensorflow as tf

    wanted = np.setdiff1d(scan.good_keys, scan.excluded)
    count = len(wanted)
    uint8 = scan.min_size == scan.max_size == (image_size, image_size)
    dtype = tf.uint8 if uint8 else tf.float32
    # On the host, where tf.data runs. Uninitialised: a page is only touched when its images are written.
    with tf.device("/cpu:0"):
        images = tf.Variable(tf.raw_ops.Empty(shape=[count, image_size, image_size, channels], dtype=dtype,
                                              init=False), trainable=False)
        labels = tf.Variable(tf.raw_ops.Empty(shape=[count], dtype=tf.int32, init=False), trainable=False)
        written = tf.Variable(tf.zeros([count], tf.bool), trainable=False)
    positions = tf.constant(wanted)

    def prepare(encoded):
        image = decoding.decode(encoded, channels)
        if not uint8:  # bilinear resizing to the image's own size returns it unchanged: no test for it
            return tf.image.resize(image, [image_size, image_size])
        # An image whose size is not its header's is resized as finish does, rounded back to uint8.
        same = tf.reduce_all(tf.equal(tf.shape(image)[:2], image_size))
        return tf.cond(same, lambda: tf.ensure_shape(image, [image_size, image_size, channels]),
                       lambda: tf.cast(tf.round(decoding.finish(image, image_size, "raw")), tf.uint8))

    def store(keys, pixels, values):
        at = tf.minimum(tf.searchsorted(positions, keys, out_type=tf.int64), count - 1)
        stored = [tf.raw_ops.ResourceScatterUpdate(resource=images.handle, indices=at, updates=pixels),
                  tf.raw_ops.ResourceScatterUpdate(resource=labels.handle, indices=at, updates=values)]
        # Marked written only once its image is: a pass stopped part-way (an iterator dropped while batches
        # decode; Keras's fit opened one more validation pass than it ran) cancels the decode, and an earlier
        # mark would let the next pass gather unwritten memory (measured under load: about 1 local MNIST run
        # in 8 evaluated its last 208-464 images as garbage, reporting accuracy 0.78-0.89 for a 0.98 model).
        with tf.control_dependencies(stored):
            mark = tf.raw_ops.ResourceScatterUpdate(resource=written.handle, indices=at,
                                                    updates=tf.ones_like(at, tf.bool))
        with tf.control_dependencies([mark]):  # a position is yielded (and gathered) once it is written
            return tf.identity(at)

    def batch(keys, encoded, values):
        pixels = tf.map_fn(prepare, encoded, fn_output_signature=tf.TensorSpec(
            [image_size, image_size, channels], dtype), parallel_iterations=16)
        return store(keys, pixels, values)

    def one(key, encoded, value):
        return store(key[None], prepare(encoded)[None], value[None])

    photos = scan.photos
    # Decoded images in flight stay a few MB, a small part of the cache, whatever the images' size.
    per_batch = max(1, min(READ_BATCH, _FILL_BYTES // (image_size * image_size * channels * dtype.size)))
    reading = encoded_batches(scan, shuffle_files=training, seed=seed, batch=per_batch)
    if training or photos:
        reading = reading.unbatch()
    if training:
        reading = reading.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    if photos:  # one per element, in parallel (see ImageScan.photos)
        reading = reading.map(plain(one), num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    else:
        if training:
            reading = reading.batch(per_batch)
        reading = reading.map(plain(batch), num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    reading = reading.unbatch()
    cached = tf.data.Dataset.range(count)
    if training:  # another seed: the filling pass's shuffle of a small share in one file is this very order
        cached = cached.shuffle(max(1, count), seed=seed + 1, reshuffle_each_iteration=True)

    def first_or_cached(_):
        return tf.cond(tf.reduce_all(written), lambda: cached, lambda: reading)

    indices = tf.data.Dataset.from_tensors(0).flat_map(plain(first_or_cached))
    return indices.apply(tf.data.experimental.assert_cardinality(count)), images, labels


def image_dataset(scan: ImageScan, *, image_size: int, channels: int, batch_size: int, scale: str = "unit",
                  training: bool = False, augment: Sequence[str] = (), seed: int = 0,
                  cache_limit_mb: int = 1024, shuffle_buffer: int = 4096, drop_remainder: bool = False,
                  repeat: bool = False, cached: bool | None = None):
    """Batches of (float32 [B, image_size, image_size, channels], int32 [B] labels) from this worker's share
    of the scanned files.

    ``batch_size`` is the GLOBAL batch (a distribution strategy splits it across replicas);
    ``drop_remainder`` gives static batch shapes (TPU). ``training`` shuffles (seeded) and applies ``augment``
    (a subset of ``AUGMENTATIONS``; never at eval). ``cached``: True: cache the share, filled by the first
    pass over it (nothing is decoded before the first batch; see :func:`_filling_cache`); False: stream;
    None: cache when the share's images (:meth:`ImageScan.held_bytes`) fit :func:`cache_budget` of
    ``cache_limit_mb``. Cached images are shuffled across the whole share (a filling pass:
    ``shuffle_buffer`` records, as streaming); otherwise records are shuffled (``shuffle_buffer`` of them,
    still encoded) before decoding, every epoch. A seeded cached pipeline repeats its order exactly; an
    uncached training one lets parallel decoding reorder for throughput.
    """
    import tensorflow as tf

    if scale not in decoding.SCALES:
        raise ValueError(f"scale must be one of {', '.join(decoding.SCALES)}, not {scale!r}")
    augment = tuple(augment) if training else ()
    _augmenter(augment, image_size, seed)  # refuses unknown augmentations before any work
    if not scan.decoded:
        raise ValueError("image_dataset needs a decoded scan: scan_images(decode=True) or load_images")
    common = {"batch_size": batch_size, "seed": seed, "augment": augment, "image_size": image_size,
              "drop_remainder": drop_remainder, "repeat": repeat}
    if cached is None:
        cached = scan.held_bytes(image_size, channels) <= cache_budget(cache_limit_mb)
    if cached:
        indices, images, labels = _filling_cache(scan, channels=channels, image_size=image_size,
                                                 training=training, seed=seed, shuffle_buffer=shuffle_buffer)
        return _cached_dataset(indices, images, labels, scale=scale, **common)

    def load(encoded, label):
        return decoding.preprocess_image(encoded, image_size, channels, scale), label

    ds = encoded_records(scan, shuffle_files=training, seed=seed)
    if training:
        ds = ds.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    ds = ds.map(load, num_parallel_calls=tf.data.AUTOTUNE)
    ds = ds.apply(tf.data.experimental.assert_cardinality(scan.share_records))
    return _finalize(ds, shuffle=False, buffer=0, deterministic=not training, **common)


def read_arrays(scan: ImageScan, channels: int):
    """The scan's good records decoded into memory: (uint8 [N, H, W, channels], int32 [N] labels), in file
    order. Every image must have the same size (e.g. MNIST); for small data and benchmarks."""
    import tensorflow as tf

    if scan.min_size != scan.max_size:
        raise DataError(f"images range from {scan.min_size} to {scan.max_size} (height, width): "
                        "read_arrays needs one size")

    def load(encoded, label):
        return decoding.decode(encoded, channels), label

    ds = encoded_records(scan, shuffle_files=False, seed=0, in_order=True)
    ds = ds.map(load, num_parallel_calls=tf.data.AUTOTUNE)
    images, labels = [], []
    for x, y in ds.batch(1024).as_numpy_iterator():
        images.append(x)
        labels.append(y)
    return np.concatenate(images), np.concatenate(labels)


def array_dataset(images, labels, *, image_size: int, batch_size: int, scale: str = "unit",
                  training: bool = False, augment: Sequence[str] = (), seed: int = 0,
                  drop_remainder: bool = False, repeat: bool = False):
    """:func:`image_dataset` for images already in memory (uint8 [N, H, W, C] as :func:`read_arrays` gives):
    the same resize, scale, shuffle, augmentation and batching, with the preprocessing done once up front."""
    import tensorflow as tf

    x = decoding.finish(tf.convert_to_tensor(images), image_size, scale)
    ds = tf.data.Dataset.from_tensor_slices((x, tf.convert_to_tensor(labels, tf.int32)))
    return _finalize(ds, batch_size=batch_size, shuffle=training, buffer=len(labels), seed=seed,
                     augment=augment if training else (), image_size=image_size,
                     drop_remainder=drop_remainder, repeat=repeat)
