"""SavedModel export: the task's raw-input serving signature in front of the trained model."""

from __future__ import annotations

import json
import logging

log = logging.getLogger("trainer")


def export_saved_model(model, data, task, export_format: str, path: str) -> None:
    """Write a SavedModel whose ``serving_default`` takes raw inputs in ``export_format``.

    The task's preprocessing layer, if it has one, is exported with the model, so vocabularies, hash crossings
    and normalisation statistics travel inside the SavedModel and serving needs no feature code. It holds
    what the endpoints use, each once: the variables they read and the lookup tables they call
    (:func:`track_lookup_tables`).
    """
    import keras

    from trainer.compat import write_export_archive

    if export_format not in task.export_formats:
        raise ValueError(f"--export-format {export_format} is not supported by --model {task.name}")
    fn, signature = task.serving_fn(model, data, export_format)
    archive = keras.export.ExportArchive()
    tracked = [model] if data.preprocessor is None else [model, data.preprocessor]
    for layer in tracked:
        track_lookup_tables(archive, layer)
    archive.add_endpoint("serving_default", fn, input_signature=signature)
    more = task.more_signatures(model, data) if task.more_signatures else {}
    for name, (more_fn, more_signature) in more.items():
        archive.add_endpoint(name, more_fn, input_signature=more_signature)
    write_export_archive(archive, path)
    log.info("exported a SavedModel (%s serving signature) to %s", export_format, path)


def track_lookup_tables(archive, layer) -> None:
    """Make ``archive`` save the lookup tables of ``layer``'s sub-layers (and its own), but not its variables.

    ExportArchive already saves every variable an endpoint reads (as the tf.Variable inside each
    keras.Variable). Tracking a whole layer adds its keras.Variables again, as other objects, so each weight
    an endpoint reads was written twice, and weights no endpoint reads were written too (the recommender's
    export held its item factors twice and its user factors, which no signature uses). Lookup tables are
    resources an endpoint calls, which the archive saves only when tracked: track the layers that own them
    (each a leaf, e.g. ``StringLookup``) one by one. That also reaches tables kept in a layer's dicts and
    lists, which ExportArchive's own walk misses before Keras 3.14 (keras-team/keras#21078).
    """
    import tensorflow as tf

    resource_type = tf.saved_model.experimental.TrackableResource
    # Keras's own layer walk sees into dicts and lists (private, but present in every Keras 3).
    for sublayer in layer._flatten_layers(include_self=True, recursive=True):
        if sublayer._flatten_layers(include_self=False, recursive=False):
            continue  # a container: its leaves are visited themselves
        owned = tf.train.TrackableView(sublayer).descendants()
        if any(isinstance(obj, resource_type) for obj in owned):
            archive.track(sublayer)


def write_text(path: str, text: str) -> None:
    """Write through tf.io.gfile, so a gs:// model directory works too."""
    import tensorflow as tf

    with tf.io.gfile.GFile(path, "w") as f:
        f.write(text)


def write_json(path: str, payload: dict) -> None:
    write_text(path, json.dumps(payload, indent=2, sort_keys=True) + "\n")


def write_example_request(path: str) -> None:
    """``<path>/example_request.json``: one instance serving_default accepts, read from the SavedModel just
    written as the server reads it (trainer.contract), for `run_job.py deploy`'s smoke prediction. Best
    effort: a model that cannot be read back here is still exported, without the file."""
    import tensorflow as tf

    from trainer.contract import EXAMPLE_FILE, example_instance, signature_inputs

    try:
        fn = tf.saved_model.load(path).signatures["serving_default"]
        write_json(f"{path}/{EXAMPLE_FILE}", {"instances": [example_instance(signature_inputs(fn))]})
    except Exception as exc:  # noqa: BLE001 - the model is exported either way
        log.warning("no %s: %s", EXAMPLE_FILE, " ".join(str(exc).split())[:300] or type(exc).__name__)
