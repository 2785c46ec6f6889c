"""SavedModel export: the task's raw-input serving signature in front of the trained model."""

from __future__ import annotations

import json
import logging

log = logging.getLogger("trainer")


def export_saved_model(model, data, task, export_format: str, path: str) -> None:
    """Write a SavedModel whose ``serving_default`` takes raw inputs in ``export_format``.

    The task's preprocessing layer, if it has one, is tracked with the model, so vocabularies, hash crossings
    and normalisation statistics travel inside the SavedModel and serving needs no feature code.
    """
    import keras

    from trainer.compat import track_nested_lookup_tables, write_export_archive

    if export_format not in task.export_formats:
        raise ValueError(f"--export-format {export_format} is not supported by --model {task.name}")
    fn, signature = task.serving_fn(model, data, export_format)
    archive = keras.export.ExportArchive()
    tracked = [model] if data.preprocessor is None else [model, data.preprocessor]
    for layer in tracked:
        archive.track(layer)
        track_nested_lookup_tables(archive, layer)
    archive.add_endpoint("serving_default", fn, input_signature=signature)
    more = task.more_signatures(model, data) if task.more_signatures else {}
    for name, (more_fn, more_signature) in more.items():
        archive.add_endpoint(name, more_fn, input_signature=more_signature)
    write_export_archive(archive, path)
    log.info("exported a SavedModel (%s serving signature) to %s", export_format, path)


def write_text(path: str, text: str) -> None:
    """Write through tf.io.gfile, so a gs:// model directory works too."""
    import tensorflow as tf

    with tf.io.gfile.GFile(path, "w") as f:
        f.write(text)


def write_json(path: str, payload: dict) -> None:
    write_text(path, json.dumps(payload, indent=2, sort_keys=True) + "\n")
