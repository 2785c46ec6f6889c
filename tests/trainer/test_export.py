"""trainer.export: what a SavedModel holds (each weight its signatures read, once; the lookup tables they
call) and that it serves after a reload."""

from __future__ import annotations

from types import SimpleNamespace


class _Archive:
    def __init__(self) -> None:
        self.calls: list = []

    def track(self, layer) -> None:
        self.calls.append(layer)


def test_only_the_layers_owning_lookup_tables_are_tracked():
    from trainer.export import track_lookup_tables
    from trainer.models.census import data as census

    preprocessor = census._preprocessor_class()({name: (1.0, 4.0) for name in census.NUMERIC}, name="p")
    archive = _Archive()
    track_lookup_tables(archive, preprocessor)
    # Exactly the vocabulary lookups (they own the hash tables, kept in a dict of the layer), not the
    # preprocessor itself (its variables would be saved a second time) nor the stateless bucketing layers.
    assert sorted(layer.name for layer in archive.calls) == sorted(f"{n}_ids" for n in census.VOCABULARIES)


def test_the_export_holds_each_weight_its_signatures_read_once_and_serves_after_a_reload(tmp_path):
    import keras
    import numpy as np
    import tensorflow as tf

    from trainer.export import export_saved_model

    class Ids(keras.layers.Layer):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.lookup = keras.layers.StringLookup(vocabulary=["a", "b", "c"], num_oov_indices=1)

        def call(self, words):
            return self.lookup(words)

    class TwoTables(keras.Model):
        def __init__(self):
            super().__init__()
            self.used = keras.layers.Embedding(4, 8, name="used")
            self.unused = keras.layers.Embedding(1000, 8, name="unused")  # trained, read by no signature

        def call(self, ids):
            return self.used(ids) + self.unused(ids)

    ids, model = Ids(), TwoTables()
    model(ids(tf.constant(["a"])))
    ids.build(None)

    def serve(words):
        return {"vector": model.used(ids(words))}

    task = SimpleNamespace(name="toy", export_formats={"JSON": "words"}, more_signatures=None,
                           serving_fn=lambda m, d, f: (serve, [tf.TensorSpec([None], tf.string)]))
    export_saved_model(model, SimpleNamespace(preprocessor=ids), task, "JSON", str(tmp_path / "model"))

    saved = [tuple(shape) for _, shape in tf.train.list_variables(str(tmp_path / "model" / "variables" /
                                                                       "variables")) if shape]
    assert saved == [(4, 8)]  # the used table once; the unused one (8,000 floats) not at all
    served = tf.saved_model.load(str(tmp_path / "model")).signatures["serving_default"]
    got = served(tf.constant(["b", "zz"]))["vector"].numpy()
    np.testing.assert_allclose(got, model.used.embeddings.numpy()[[2, 0]])
