"""Reload an exported image classifier in a fresh interpreter and serve raw encoded images through it.

    python tests/trainer/score_image_model.py MODEL_DIR GLOB [LIMIT]

Prints one JSON line: the signature's inputs, its class names, and for the first LIMIT records (default all)
of the TFRecord shards GLOB matches, in the flowers schema: each record's probabilities and predicted label,
its true class name, the accuracy and mean cross-entropy over them, and whether every image was a JPEG.
Standalone on purpose (TensorFlow only, nothing from this repository): the trainer tests run it with the
lock's interpreter, the prebuilt-stack tests inside a foreign TensorFlow stack. Images go through
``serving_default`` as the bytes Vertex AI prediction decodes from ``{"image_bytes": {"b64": ...}}``
instances.
"""

import glob
import json
import sys

import tensorflow as tf

SPEC = {"image/encoded": tf.io.FixedLenFeature([], tf.string),
        "image/class/label": tf.io.FixedLenFeature([], tf.int64)}
BATCH = 256


def main(model_dir: str, pattern: str, limit: int) -> dict:
    serve = tf.saved_model.load(model_dir).signatures["serving_default"]
    records = tf.data.TFRecordDataset(sorted(glob.glob(pattern)))
    if limit:
        records = records.take(limit)
    batches = records.map(lambda r: tf.io.parse_single_example(r, SPEC)).batch(BATCH)
    probabilities, predicted, truth, losses, jpeg, names = [], [], [], [], True, None
    for batch in batches:
        out = serve(image_bytes=batch["image/encoded"])
        names = [c.decode() for c in out["classes"].numpy()[0]]
        probabilities += out["probabilities"].numpy().tolist()
        predicted += [c.decode() for c in out["label"].numpy()]
        truth += [names[i] for i in batch["image/class/label"].numpy()]
        # Keras's sparse categorical cross-entropy on probabilities: clipped to [1e-7, 1 - 1e-7].
        chosen = tf.gather(out["probabilities"], batch["image/class/label"], batch_dims=1)
        losses += (-tf.math.log(tf.clip_by_value(chosen, 1e-7, 1 - 1e-7))).numpy().tolist()
        jpeg = jpeg and all(b[:2] == b"\xff\xd8" for b in batch["image/encoded"].numpy())
    return {"inputs": sorted(serve.structured_input_signature[1]), "classes": names,
            "probabilities": probabilities, "label": predicted, "truth": truth,
            "accuracy": sum(p == t for p, t in zip(predicted, truth, strict=True)) / len(truth),
            "loss": sum(losses) / len(losses), "jpeg": jpeg}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 0)))
