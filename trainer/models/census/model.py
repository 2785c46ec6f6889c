"""The census Wide & Deep network (``build_model``) and its raw-input serving functions (``serving_fn``).

TensorFlow and Keras are imported inside the functions: the task package imports this module for its hooks.
"""

from __future__ import annotations

from trainer.csv_dataset import decode_csv_batch
from trainer.models.base import TaskData
from trainer.models.census.data import BUCKETS, CROSSES, LABELS, NUMERIC, SCHEMA, VOCABULARIES


def _id_inputs() -> dict[str, int]:
    """Integer-id model inputs and their vocabulary sizes (including the OOV index)."""
    sizes = {name: len(vocab) + 1 for name, vocab in VOCABULARIES.items()}
    sizes.update({name: len(bounds) + 1 for name, (_, bounds) in BUCKETS.items()})
    sizes.update({name: bins for name, (_, bins) in CROSSES.items()})
    return sizes


def build_model(cfg, data: TaskData):
    import keras

    sizes = _id_inputs()
    edges = data.state["edges"]
    inputs = {name: keras.Input(shape=(), dtype="int64", name=name) for name in sizes}
    inputs["numeric"] = keras.Input(shape=(len(NUMERIC),), dtype="float32", name="numeric")
    encoded = {name: keras.Input(shape=(len(e) - 1,), dtype="float32", name=f"ple_{name}")
               for name, e in edges.items()}
    inputs.update({f"ple_{name}": tensor for name, tensor in encoded.items()})

    # Wide: one weight per id of every categorical, bucket and cross (an Embedding of width 1 is a sparse
    # linear model without materialising one-hot vectors), and a piecewise-linear function of each numeric
    # column (a weight per bin of its encoding).
    wide_terms = [keras.layers.Embedding(size, 1, name=f"wide_{name}")(inputs[name])
                  for name, size in sizes.items()]
    wide_terms += [keras.layers.Dense(1, use_bias=False, name=f"wide_ple_{name}")(tensor)
                   for name, tensor in encoded.items()]
    wide_logit = keras.layers.Add(name="wide_logit")(wide_terms)

    deep_parts = [keras.layers.Embedding(size, cfg.task.embedding_size, name=f"embed_{name}")(inputs[name])
                  for name, size in sizes.items() if name in VOCABULARIES or name in BUCKETS]
    # Each numeric column's encoding through its own linear layer + ReLU (the paper's PLE-LR embedding).
    deep_parts += [keras.layers.Dense(cfg.task.numeric_embedding_size, activation="relu",
                                      name=f"embed_ple_{name}")(tensor) for name, tensor in encoded.items()]
    x = keras.layers.Concatenate(name="deep_input")([*deep_parts, inputs["numeric"]])
    for i, units in enumerate(cfg.task.layer_sizes()):
        x = keras.layers.Dense(units, activation="relu", name=f"hidden_{i}")(x)
        if cfg.task.dropout:
            x = keras.layers.Dropout(cfg.task.dropout, seed=cfg.seed + i, name=f"dropout_{i}")(x)
    deep_logit = keras.layers.Dense(1, name="deep_logit")(x)
    logit = keras.layers.Add(name="logit")([wide_logit, deep_logit])
    probability = keras.layers.Activation("sigmoid", name="probability")(logit)
    model = keras.Model(inputs, probability, name="census_wide_deep")
    # Cosine decay to zero over the run: the last epochs average out the noise of the final weights.
    steps = (cfg.steps_per_epoch or data.train_steps) * cfg.num_epochs
    schedule = keras.optimizers.schedules.CosineDecay(cfg.learning_rate, decay_steps=max(1, steps))
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate=schedule),
        loss=keras.losses.BinaryCrossentropy(),
        metrics=[keras.metrics.BinaryAccuracy(name="accuracy"), keras.metrics.AUC(name="auc")],
    )
    return model


def _feature_lines_to_features(lines):
    """A raw census line, with or without the trailing label column, -> raw feature tensors."""
    import tensorflow as tf

    n_features = len(SCHEMA.features)
    delimiters = tf.strings.length(lines) - tf.strings.length(tf.strings.regex_replace(lines, ",", ""))
    with_label = tf.equal(delimiters, n_features)
    # Give feature-only lines a dummy label so the training decoder parses both shapes.
    lines = tf.where(with_label, lines, tf.strings.join([lines, f",{LABELS[0]}"]))
    features, _ = decode_csv_batch(lines, SCHEMA)
    return features


def serving_fn(model, data: TaskData, export_format: str):
    import tensorflow as tf

    dtypes = {"int": tf.int64, "float": tf.float32, "str": tf.string}
    preprocessor = data.preprocessor

    def predict(features):
        # The model's sigmoid is P(LABELS[1]). Each output says which class a figure is for: `probability` is
        # that of `label` (a bare P(>50K) beside label "<=50K" read as the label's), and `scores` holds every
        # class's, in the order of `classes` (Vertex AI's tabular classification answers with the same pair).
        positive = tf.reshape(model(preprocessor(features), training=False), [-1])
        class_id = tf.cast(positive > 0.5, tf.int64)
        scores = tf.stack([1.0 - positive, positive], axis=1)
        return {"label": tf.gather(tf.constant(LABELS), class_id), "class_id": class_id,
                "probability": tf.gather(scores, class_id, batch_dims=1), "scores": scores,
                "classes": tf.tile(tf.constant([LABELS]), [tf.shape(positive)[0], 1])}

    if export_format == "JSON":
        signature = [{c.name: tf.TensorSpec([None], dtypes[c.kind], name=c.name) for c in SCHEMA.features}]
        return predict, signature
    if export_format == "CSV":
        def from_csv(csv_row):
            return predict(_feature_lines_to_features(csv_row))

        return from_csv, [tf.TensorSpec([None], tf.string, name="csv_row")]
    if export_format == "EXAMPLE":
        spec = {c.name: tf.io.FixedLenFeature([], dtypes[c.kind]) for c in SCHEMA.features}

        def from_example(examples):
            return predict(tf.io.parse_example(examples, spec))

        return from_example, [tf.TensorSpec([None], tf.string, name="examples")]
    raise ValueError(f"unsupported export format {export_format!r}")
