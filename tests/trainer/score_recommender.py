"""Reload an exported recommender in a fresh interpreter and call each of its signatures.

    python tests/trainer/score_recommender.py MODEL_DIR

Prints one JSON line: the signatures; ``top_k`` for users 1, unknown and 2 with k = 5, 3, 2 (items, scores
and known), and whether ``serving_default`` answers the same request with the same outputs;
``similar_items`` for item 1 (k = 5) and an unknown item (k = 3); the shapes of both signatures' answers to
an empty request.
Standalone on purpose (TensorFlow only, nothing from this repository): the trainer tests run it with the
lock's interpreter, the prebuilt-stack tests inside a foreign TensorFlow stack. The ids are MovieLens's.
"""

import json
import sys

import tensorflow as tf


def main(model_dir: str) -> dict:
    model = tf.saved_model.load(model_dir)
    request = {"user": tf.constant(["1", "no-such-user", "2"]), "k": tf.constant([5, 3, 2])}
    best = model.signatures["top_k"](**request)
    default = model.signatures["serving_default"](**request)
    near = model.signatures["similar_items"]
    similar = near(item=tf.constant(["1", "no-such-item"]), k=tf.constant([5, 3]))
    no_k = tf.constant([], tf.int32)
    empty = [model.signatures["top_k"](user=tf.constant([], tf.string), k=no_k),
             near(item=tf.constant([], tf.string), k=no_k)]
    return {"signatures": sorted(model.signatures),
            "default_is_top_k": sorted(default) == sorted(best) and all(
                (default[name].numpy() == best[name].numpy()).all() for name in best),
            "known": best["known"].numpy().tolist(),
            "items": [[v.decode() for v in row] for row in best["items"].numpy()],
            "scores": best["scores"].numpy().tolist(),
            "similar": [[v.decode() for v in row] for row in similar["items"].numpy()],
            "similar_scores": similar["scores"].numpy().tolist(),
            "similar_known": similar["known"].numpy().tolist(),
            "empty": [{name: list(value.shape) for name, value in sorted(out.items())} for out in empty]}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1])))
