"""Image classification from TFRecord shards, registered as ``--model image_classifier``.

Input: shards in the flowers schema (``image/encoded`` JPEG or PNG, ``image/class/label``,
``image/class/text``; see :mod:`trainer.models.image_classifier.records`), matched by globs, local or
``gs://``. The classes and their names come from the training data (or ``--num-classes``); evaluation uses the
training data's classes. Every record is checked before training
(:mod:`trainer.models.image_classifier.checks`: records and image headers first, then one decode); images that
fit ``--cache-limit-mb`` and the machine's memory are cached in memory as the first epoch reads them
(:mod:`trainer.models.image_classifier.data`). Under multi-worker training each worker reads, checks and
decodes only its share of the training and evaluation files (:mod:`trainer.sharding`), and the log's ``data:``
line says which share.

Models (:mod:`trainer.models.image_classifier.model`): ``--backbone cnn``, a small CNN in the shape of
Google's Keras codelabs (conv blocks, a dense layer of ``--num-units``, ``--dropout``), or a
keras.applications backbone (``mobilenet_v2``, ``resnet50``) with a new head, initialised from
``--base-weights`` (a local or gs:// weights file; nothing is ever downloaded) and trained head-only unless
``--fine-tune``. SGD with ``--momentum`` or Adam. Export: a SavedModel whose ``serving_default`` takes raw
encoded image bytes, what Vertex AI prediction decodes ``{"image_bytes": {"b64": ...}}`` instances to, and
returns class probabilities and names.

    python -m trainer.task --model image_classifier --help
    python -m trainer.task --model image_classifier --channels 1 --image-size 28 \\
        --train-files 'data/mnist/mnist-train.tfrecord-*' --eval-files 'data/mnist/mnist-eval.tfrecord-*'

This module imports no TensorFlow at import time: the job tooling reads its spec.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

from trainer.models.base import (
    MAXIMIZE,
    MINIMIZE,
    Task,
    TaskConfig,
    TaskData,
    TaskSpec,
    check,
    integral,
    option,
)
from trainer.sharding import UNSHARDED, Shard

log = logging.getLogger("trainer")

BACKBONES = ("cnn", "mobilenet_v2", "resnet50")
OPTIMIZERS = ("sgd", "adam")
AUGMENT = ("none", "flip", "crop", "flip_crop")
TOP_K_METRICS = ("top_k_accuracy", "train_top_k_accuracy")
# With no --image-size: the data's own size when every training image has one, else this.
FALLBACK_IMAGE_SIZE = 128
MAX_IMAGE_SIZE = 1024  # --image-size's largest, and the largest size taken from the data


@dataclass(frozen=True)
class ImageConfig(TaskConfig):
    """The image classifier's own flags."""

    backbone: str = option("cnn", "cnn (a small CNN), or a keras.applications backbone with a new head "
                           "(default %(default)s)", choices=BACKBONES)
    image_size: int = option(0, "resize images to this height and width in pixels (default 0: the data's "
                             f"size when all training images share one, else {FALLBACK_IMAGE_SIZE})",
                             type=integral, metavar="PIXELS")
    channels: int = option(3, "decode images to 1 (grayscale) or 3 (RGB) channels; backbones need 3 "
                           "(default %(default)s)", type=integral, choices=(1, 3))
    num_units: int = option(128, "width of the dense layer before the classes (0: none, backbones only; "
                            "default %(default)s)", type=integral, metavar="N")
    dropout: float = option(0.25, "dropout rate before the dense layers (default %(default)s)")
    optimizer: str = option("adam", "optimizer (default %(default)s)", choices=OPTIMIZERS)
    momentum: float = option(0.9, "SGD momentum (default %(default)s; ignored by adam)")
    base_weights: str | None = option(None, "weights file of the backbone (local or gs://, e.g. Keras's "
                                      "*_no_top.h5); default: random initialisation", type=str,
                                      metavar="PATH")
    fine_tune: bool = option(False, "train the backbone too, not only the new head (default %(default)s)")
    augment: str = option("none", "random training augmentation (default %(default)s)", choices=AUGMENT)
    num_classes: int = option(0, "number of classes (default 0: from the training data's labels)",
                              type=integral, metavar="N")
    max_bad_records: int = option(0, "skip and report up to N records that are malformed, undecodable or "
                                  "labelled outside the classes instead of stopping at the first "
                                  "(default 0)", type=integral, metavar="N")

    def validate(self) -> None:
        from trainer.models.image_classifier.records import MAX_CLASSES

        check(self.image_size == 0 or 8 <= self.image_size <= MAX_IMAGE_SIZE, "image_size",
              f"0 (the data's size) or 8..{MAX_IMAGE_SIZE}", self.image_size)
        check(self.backbone == "cnn" or self.image_size == 0 or self.image_size >= 32, "image_size",
              f"at least 32 for --backbone {self.backbone}", self.image_size)
        check(self.backbone == "cnn" or self.channels == 3, "channels", f"3 for --backbone {self.backbone} "
              "(grayscale data is decoded to RGB)", self.channels)
        check(self.num_units >= (1 if self.backbone == "cnn" else 0), "num_units",
              "a positive integer" if self.backbone == "cnn" else "an integer >= 0", self.num_units)
        check(0 <= self.dropout < 1, "dropout", "in [0, 1)", self.dropout)
        check(0 <= self.momentum <= 1, "momentum", "in [0, 1]", self.momentum)
        check(self.base_weights is None or self.backbone != "cnn", "base_weights",
              "used with --backbone mobilenet_v2 or resnet50 only", self.base_weights)
        check(not self.fine_tune or self.backbone != "cnn", "fine_tune",
              "used with --backbone mobilenet_v2 or resnet50 only", self.fine_tune)
        check(self.num_classes == 0 or 2 <= self.num_classes <= MAX_CLASSES, "num_classes",
              f"0 (from the data) or 2..{MAX_CLASSES}", self.num_classes)
        check(self.max_bad_records >= 0, "max_bad_records", "an integer >= 0", self.max_bad_records)

    def augmentations(self) -> tuple[str, ...]:
        return () if self.augment == "none" else tuple(self.augment.split("_"))


SPEC = TaskSpec(
    name="image_classifier",
    description="image classification from TFRecord shards (small CNN, MobileNetV2 or ResNet50)",
    config=ImageConfig,
    # top_k_accuracy (k = 5) is measured only with more than 5 classes.
    metrics={"accuracy": MAXIMIZE, "top_k_accuracy": MAXIMIZE, "loss": MINIMIZE},
    export_formats={"IMAGE_BYTES": "encoded JPEG or PNG bytes, as Vertex AI decodes "
                                   "{\"image_bytes\": {\"b64\": ...}} instances"},
    defaults={"num_epochs": 10, "train_batch_size": 64, "eval_batch_size": 256, "learning_rate": 0.001},
    flag_help={"learning_rate": "SGD or Adam learning rate (default %(default)s)"},
)


def make_data(cfg, global_train_batch: int, global_eval_batch: int,
              shard: Shard = UNSHARDED) -> TaskData:

    from trainer.input_files import DataError, cache_budget, expand_files
    from trainer.models.image_classifier.checks import load_images, scan_images
    from trainer.models.image_classifier.data import image_dataset
    from trainer.models.image_classifier.scan import cache_scans, cached_scans_path, load_cached_scans
    from trainer.result_cache import may_claim

    task = cfg.task
    train_files = expand_files(cfg.train_files, "--train-files")
    eval_files = expand_files(cfg.eval_files, "--eval-files")
    common = {"channels": task.channels, "max_bad_records": task.max_bad_records, "shard": shard}
    # A trial or restart before this one may have checked the same files with the same flags: reuse its
    # scans only if every worker has its own (the checks below are collectives every worker must join). A
    # one-worker run waits for a trial checking them now (trainer.result_cache's claims).
    cache_path = cached_scans_path(shard.cache_dir, [train_files, eval_files],
                                   [task.channels, task.num_classes, task.max_bad_records, shard.index,
                                    shard.count])
    cached_scans = load_cached_scans(cache_path, [train_files, eval_files], claim=may_claim(shard))
    reuse = all(shard.exchange(cached_scans is not None))
    if reuse:
        train_scan, eval_scan = cached_scans
        log.info("data: the checks of a run before this one, from %s", cache_path)
    else:
        # Each worker checks only its share (shard) and the workers combine what they found. The first
        # pass reads records and image headers only: the image size and what an in-memory cache would hold
        # are known before any image is decoded.
        train_scan = scan_images(train_files, num_classes=task.num_classes or None, flag="--train-files",
                                 decode=False, **common)
        # Evaluation is labelled in the training data's classes: a label beyond them is a bad record there.
        eval_scan = scan_images(eval_files, class_names=train_scan.class_names, flag="--eval-files",
                                decode=False, **common)
    if train_scan.num_classes < 2:
        raise DataError(f"--train-files: {train_scan.num_classes} class: a classifier needs at least 2")
    if cfg.hypertune_metric in TOP_K_METRICS and train_scan.num_classes <= 5:
        raise DataError(f"--hypertune-metric {cfg.hypertune_metric}: top-5 accuracy needs more than 5 "
                        f"classes (the data has {train_scan.num_classes}); report accuracy or loss")
    size = task.image_size
    if not size:
        (height, width), largest = train_scan.min_size, train_scan.max_size
        # The data's size within the flag's range: 2048x2048 photos would otherwise size the model for them.
        size = (height if (height, width) == largest and MAX_IMAGE_SIZE >= height == width >= 8
                else FALLBACK_IMAGE_SIZE)
    # Where the share's preprocessed images fit this process's memory budget they are cached in memory,
    # filled by the first pass over the share as training reads it: nothing is decoded for the in-memory
    # cache before the first step, whether this run checked the data (its second pass only validates) or
    # reuses cached checks. Training data has the first claim on the budget.
    budget = cache_budget(cfg.cache_limit_mb)
    held = train_scan.held_bytes(size, task.channels)
    train_in_memory = held <= budget
    eval_in_memory = eval_scan.held_bytes(size, task.channels) <= budget - (held if train_in_memory else 0)
    if not reuse:
        train_scan = load_images(train_scan, **common)
        eval_scan = load_images(eval_scan, **common)
    # Training repeats each worker's share for the epoch's global steps: an empty one has no first batch and
    # the others would wait for it in the step's collectives (trainer.sharding.empty_share). Evaluation
    # needs no such check: its pipeline claims no length (below), so the strategy keeps unequal shares, an
    # empty one included, in step.
    shard.require_records(train_scan.share_records, train_files, "--train-files")
    options = {"image_size": size, "channels": task.channels, "seed": cfg.seed}
    train = image_dataset(train_scan, batch_size=global_train_batch, training=True, cached=train_in_memory,
                          augment=task.augmentations(), repeat=cfg.steps_per_epoch is not None, **options)
    evaluation = image_dataset(eval_scan, batch_size=global_eval_batch, cached=eval_in_memory, **options)
    if shard.sharded:
        # tf.distribute splits each of a worker's global batches into one piece per replica of the cluster
        # and a worker takes one piece per step, so Keras, which runs as many steps as the dataset claims
        # batches, would evaluate only the first 1/workers of each share. With no claimed length it reads to
        # the end, and the strategy keeps workers with unequal shares in step until all are done.
        evaluation = evaluation.filter(lambda images, labels: True)
    report = {
        split: {"files": list(scan.files), "records": scan.records, "class_counts": list(scan.class_counts),
                "skipped_records": [str(b) for b in scan.bad_records], "skipped": scan.bad_counts(),
                "share": {**scan.share(), "worker": shard.index, "workers": shard.count,
                          "cached": in_memory}}
        for split, scan, in_memory in (("train", train_scan, train_in_memory),
                                       ("eval", eval_scan, eval_in_memory))
    }
    shares = []
    for split, entry in report.items():
        share = entry["share"]
        shares.append(f"{split} {share['records']} of {share['of_records']} records ({share['records_read']} "
                      f"read) from {share['files']} of {share['of_files']} file(s)"
                      f"{', by record' if share['by_record'] else ''}, "
                      f"{'cached' if share['cached'] else 'streamed'}")
    shares = "; ".join(shares)
    if shard.sharded:  # the loop logs what this worker reads per epoch from it (trainer.train), as for census
        report["shard"] = {"index": shard.index, "count": shard.count, "by_record": train_scan.stride > 1,
                           "train_records": train_scan.share_records, "eval_records": eval_scan.share_records}
    report.update(classes=list(train_scan.class_names), image_size=size, channels=task.channels,
                  summary=f"train: {train_scan.summary()}; eval: {eval_scan.summary()}; {size}x{size}x"
                          f"{task.channels}; this worker's share ({shard.index + 1} of {shard.count}): "
                          f"{shares}")
    # The model takes preprocessed pixels; the serving function decodes, resizes and scales in front of it,
    # with no state to export (preprocessor None).
    checked = [train_scan, eval_scan]
    return TaskData(train=train, eval=evaluation, train_rows=train_scan.records, eval_rows=eval_scan.records,
                    train_steps=max(1, math.ceil(train_scan.records / global_train_batch)), report=report,
                    write_cache=None if reuse else lambda: cache_scans(cache_path, checked))


def build_model(cfg, data: TaskData):
    from trainer.input_files import DataError
    from trainer.models.image_classifier.model import (
        WeightsError,
        build_backbone_model,
        build_cnn,
        compile_classifier,
    )

    task, classes = cfg.task, len(data.report["classes"])
    size, channels = data.report["image_size"], data.report["channels"]
    if task.backbone == "cnn":
        model = build_cnn(size, channels, classes, num_units=task.num_units, dropout=task.dropout,
                          seed=cfg.seed)
    else:
        try:
            model = build_backbone_model(task.backbone, size, classes, num_units=task.num_units,
                                         dropout=task.dropout, base_weights=task.base_weights,
                                         fine_tune=task.fine_tune, seed=cfg.seed)
        except WeightsError as exc:  # bad input: one line, exit 2, like a bad data file
            raise DataError(f"--base-weights: {str(exc).removeprefix('base weights ')}") from None
        if not task.base_weights:  # a backbone is there for its pretrained features: say it has none
            data.report.setdefault("notes", []).append(random_weights_note(task, classes))
    # Cosine decay to zero over the run, as census: the last epochs settle instead of bouncing on the final
    # batches (it steadied MNIST accuracy across seeds).
    steps = (cfg.steps_per_epoch or data.train_steps) * cfg.num_epochs
    return compile_classifier(model, task.optimizer, cfg.learning_rate, task.momentum, classes,
                              decay_steps=max(1, steps))


def random_weights_note(task: ImageConfig, classes: int) -> str:
    """The line a run prints when its keras.applications backbone starts from random weights."""
    chance = f"expect accuracy near chance ({1 / classes:.2f} for {classes} classes)"
    advice = "for transfer learning pass --base-weights FILE (e.g. Keras's ImageNet *_no_top.h5)"
    if task.fine_tune:
        return (f"--backbone {task.backbone} starts from random weights (no --base-weights) and trains from "
                f"scratch: on little data {chance}; {advice}")
    return (f"--backbone {task.backbone} is frozen at random weights (no --base-weights, no --fine-tune): "
            f"only the new head trains, on random features, so {chance}; {advice}")


def serving_fn(model, data: TaskData, export_format: str):
    from trainer.models.image_classifier.model import serving_function

    if export_format != "IMAGE_BYTES":
        raise ValueError(f"unsupported export format {export_format!r}")
    report = data.report
    serve = serving_function(model, report["image_size"], report["channels"], report["classes"])
    return serve.python_function, serve.input_signature


TASK = Task(spec=SPEC, make_data=make_data, build_model=build_model, serving_fn=serving_fn)
