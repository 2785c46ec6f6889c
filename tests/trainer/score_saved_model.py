"""Reload exported census SavedModels in a fresh interpreter and score raw adult.test rows through them.

    python tests/trainer/score_saved_model.py EVAL_FILE MODEL_DIR FORMAT [MODEL_DIR FORMAT ...]

Prints one JSON line {FORMAT: scores}. Standalone on purpose (TensorFlow, Keras and NumPy only, nothing from
this repository): the trainer tests run it with the lock's interpreter, the prebuilt-stack tests inside a
foreign TensorFlow stack. Rows go through ``serving_default`` in the model's export format (JSON features,
CSV lines with and without the label column, serialized tf.Examples); labels are kept for scoring only.
"""

import json
import sys

import keras
import numpy as np
import tensorflow as tf

NAMES = ["age", "workclass", "fnlwgt", "education", "education_num", "marital_status", "occupation",
         "relationship", "race", "gender", "capital_gain", "capital_loss", "hours_per_week", "native_country"]
INTS = {"age", "fnlwgt", "education_num", "capital_gain", "capital_loss", "hours_per_week"}


def score(model_dir: str, fmt: str, lines: list[str]) -> dict:
    rows = [[f.strip() for f in line.split(",")] for line in lines]
    labels = np.array([r[14].rstrip(".") == ">50K" for r in rows], dtype=np.float32)
    loaded = tf.saved_model.load(model_dir)
    serve = loaded.signatures["serving_default"]
    if fmt == "JSON":
        out = serve(**{n: tf.constant([int(r[i]) if n in INTS else r[i] for r in rows],
                                      tf.int64 if n in INTS else tf.string) for i, n in enumerate(NAMES)})
    elif fmt == "CSV":
        half = len(lines) // 2  # half the rows as in the file (with the label), half without it
        out = serve(csv_row=tf.constant(lines[:half] + [line.rsplit(",", 1)[0] for line in lines[half:]]))
    else:
        def example(r):
            feature = {n: tf.train.Feature(int64_list=tf.train.Int64List(value=[int(r[i])])) if n in INTS
                       else tf.train.Feature(bytes_list=tf.train.BytesList(value=[r[i].encode()]))
                       for i, n in enumerate(NAMES)}
            return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()
        out = serve(examples=tf.constant([example(r) for r in rows]))
    prob = out["scores"].numpy()[:, 1]  # P(>50K): scores follow `classes`
    assert all(list(c) == [b"<=50K", b">50K"] for c in out["classes"].numpy())
    chosen = out["probability"].numpy()
    auc = keras.metrics.AUC()
    auc.update_state(labels, prob)
    return {
        "rows": len(rows), "signatures": sorted(loaded.signatures),
        "signature_inputs": sorted(serve.structured_input_signature[1]),
        "accuracy": float(np.mean((prob > 0.5) == (labels == 1))), "auc": float(auc.result()),
        "probability_range": [float(prob.min()), float(prob.max())],
        "probability_is_the_labels": bool(np.allclose(chosen, np.where(prob > 0.5, prob, 1 - prob))),
        "class_ids_match": bool(np.all(out["class_id"].numpy() == (prob > 0.5))),
        "labels": sorted({x.decode() for x in out["label"].numpy()}),
        "first": {"probability": float(chosen[0]), "label": out["label"].numpy()[0].decode()},
    }


def main(argv: list[str]) -> None:
    path, pairs = argv[0], argv[1:]
    with open(path) as f:
        lines = [line for line in f.read().splitlines() if line.strip() and not line.startswith("|")]
    models = zip(pairs[::2], pairs[1::2], strict=True)
    print(json.dumps({fmt: score(model_dir, fmt, lines) for model_dir, fmt in models}))


if __name__ == "__main__":
    main(sys.argv[1:])
