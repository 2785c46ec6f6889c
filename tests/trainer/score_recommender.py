"""Reload an exported recommender in a fresh interpreter and call each of its signatures.

    python tests/trainer/score_recommender.py MODEL_DIR

Prints one JSON line: the signatures; ``serving_default`` on (user 1, item 1), (1, 50), (an unknown user,
50) and (1, an unknown item), with its known_user/known_item flags; ``top_k`` for users 1, unknown and 2 with
k = 5, 3, 2 (items and scores); ``similar_items`` for item 1 (k = 5) and an unknown item (k = 3).
Standalone on purpose (TensorFlow only, nothing from this repository): the trainer tests run it with the
lock's interpreter, the prebuilt-stack tests inside a foreign TensorFlow stack. The ids are MovieLens's.
"""

import json
import sys

import tensorflow as tf


def main(model_dir: str) -> dict:
    model = tf.saved_model.load(model_dir)
    rate, top_k = model.signatures["serving_default"], model.signatures["top_k"]
    rated = rate(user=tf.constant(["1", "1", "no-such-user", "1"]), item=tf.constant(["1", "50", "50", "?"]))
    best = top_k(user=tf.constant(["1", "no-such-user", "2"]), k=tf.constant([5, 3, 2]))
    near = model.signatures["similar_items"]
    similar = near(item=tf.constant(["1", "no-such-item"]), k=tf.constant([5, 3]))
    return {"signatures": sorted(model.signatures), "score": rated["score"].numpy().tolist(),
            "known_user": rated["known_user"].numpy().tolist(),
            "known_item": rated["known_item"].numpy().tolist(),
            "items": [[v.decode() for v in row] for row in best["items"].numpy()],
            "scores": best["scores"].numpy().tolist(),
            "similar": [[v.decode() for v in row] for row in similar["items"].numpy()],
            "similar_scores": similar["scores"].numpy().tolist(),
            "similar_known": similar["known"].numpy().tolist()}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1])))
