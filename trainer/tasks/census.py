"""Census income (UCI Adult): a Wide & Deep binary classifier, registered as ``--model wide_deep``.

Wide part: a linear model over every categorical column, bucketised age and hashed feature crosses
(``HashedCrossing``), plus a piecewise-linear function of each numeric column. Deep part: embeddings of the
categorical columns, of each numeric column's piecewise-linear encoding (``--numeric-bins`` quantile bins of
the training split, Gorishniy et al. 2022) and the normalised numeric columns, through ``num_layers`` ReLU
layers of ``max(2, int(first_layer_size * scale_factor**i))`` units. The two logits are summed into one
sigmoid. The encoding is what brings the model level with gradient boosting on the UCI split
(``scripts/benchmarks/bench_census_gbdt.py``): accuracy 0.8616 -> 0.8697, AUC 0.9189 -> 0.9274.

Preprocessing (vocabulary lookups, bucketising, crossing, normalising) is a Keras layer that runs in the
tf.data pipeline during training, so it is computed once and cached and never sits in the training step
(which is also what TPUs need), and is put back in front of the model for export.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainer.data import (
    Column,
    CsvSchema,
    ScanKeeper,
    cache_budget,
    count_batches,
    decode_csv_batch,
    expand_files,
    scan_share,
    text_dataset,
)
from trainer.sharding import UNSHARDED, Shard
from trainer.tasks.base import (
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

# Plausible raw values per numeric column (inclusive): a row outside them is refused like a malformed row
# (--max-bad-rows). Generous on purpose: they stop corrupt values (an age of -9e18 would train silently and
# wreck the normalisation statistics), never real people. Observed in adult.data and adult.test (48,842 rows,
# none outside): age 17..90, fnlwgt 12,285..1,490,400 (a sampling weight: people represented, US population
# ~3.3e8), education_num 1..16 (adult.names' codes), capital_gain 0..99,999 (the Census top-code) and
# capital_loss 0..4,356 (US dollars a year), hours_per_week 1..99 (a week has 168 hours).
PLAUSIBLE: dict[str, tuple[float, float]] = {
    "age": (0, 150),
    "fnlwgt": (0, 1e8),
    "education_num": (0, 30),
    "capital_gain": (0, 1e7),
    "capital_loss": (0, 1e7),
    "hours_per_week": (0, 168),
}

SCHEMA = CsvSchema(
    columns=(
        Column("age", "int", plausible=PLAUSIBLE["age"]),
        Column("workclass", "str"),
        Column("fnlwgt", "int", plausible=PLAUSIBLE["fnlwgt"]),
        Column("education", "str"),
        Column("education_num", "int", plausible=PLAUSIBLE["education_num"]),
        Column("marital_status", "str"),
        Column("occupation", "str"),
        Column("relationship", "str"),
        Column("race", "str"),
        Column("gender", "str"),
        Column("capital_gain", "int", transform="log1p", plausible=PLAUSIBLE["capital_gain"]),
        Column("capital_loss", "int", transform="log1p", plausible=PLAUSIBLE["capital_loss"]),
        Column("hours_per_week", "int", plausible=PLAUSIBLE["hours_per_week"]),
        Column("native_country", "str"),
        Column("income_bracket", "str"),
    ),
    label="income_bracket",
    positive=(">50K",),
    negative=("<=50K",),
    label_suffix=".",
)
LABELS = ("<=50K", ">50K")

# Value sets documented in the dataset's adult.names; "?" (missing) and anything unseen map to the OOV index.
VOCABULARIES: dict[str, tuple[str, ...]] = {
    "workclass": ("Private", "Self-emp-not-inc", "Self-emp-inc", "Federal-gov", "Local-gov", "State-gov",
                  "Without-pay", "Never-worked"),
    "education": ("Bachelors", "Some-college", "11th", "HS-grad", "Prof-school", "Assoc-acdm",
                  "Assoc-voc", "9th", "7th-8th", "12th", "Masters", "1st-4th", "10th", "Doctorate", "5th-6th",
                  "Preschool"),
    "marital_status": ("Married-civ-spouse", "Divorced", "Never-married", "Separated", "Widowed",
                       "Married-spouse-absent", "Married-AF-spouse"),
    "occupation": ("Tech-support", "Craft-repair", "Other-service", "Sales", "Exec-managerial",
                   "Prof-specialty", "Handlers-cleaners", "Machine-op-inspct", "Adm-clerical",
                   "Farming-fishing", "Transport-moving", "Priv-house-serv", "Protective-serv",
                   "Armed-Forces"),
    "relationship": ("Wife", "Own-child", "Husband", "Not-in-family", "Other-relative", "Unmarried"),
    "race": ("White", "Asian-Pac-Islander", "Amer-Indian-Eskimo", "Other", "Black"),
    "gender": ("Female", "Male"),
    "native_country": ("United-States", "Cambodia", "England", "Puerto-Rico", "Canada", "Germany",
                       "Outlying-US(Guam-USVI-etc)", "India", "Japan", "Greece", "South", "China", "Cuba",
                       "Iran", "Honduras", "Philippines", "Italy", "Poland", "Jamaica", "Vietnam", "Mexico",
                       "Portugal", "Ireland", "France", "Dominican-Republic", "Laos", "Ecuador", "Taiwan",
                       "Haiti", "Columbia", "Hungary", "Guatemala", "Nicaragua", "Scotland", "Thailand",
                       "Yugoslavia", "El-Salvador", "Trinadad&Tobago", "Peru", "Hong", "Holand-Netherlands"),
}
AGE_BOUNDARIES = (18.0, 25.0, 30.0, 35.0, 40.0, 45.0, 50.0, 55.0, 60.0, 65.0)
# fnlwgt is a survey sampling weight, not a property of the person: accepted as input, not used.
NUMERIC = ("age", "education_num", "capital_gain", "capital_loss", "hours_per_week")
# name -> (crossed inputs, hash bins); inputs are categorical columns or "age_bucket".
CROSSES: dict[str, tuple[tuple[str, ...], int]] = {
    "education_x_occupation": (("education", "occupation"), 1000),
    "age_x_education_x_occupation": (("age_bucket", "education", "occupation"), 1000),
    "gender_x_marital_x_relationship": (("gender", "marital_status", "relationship"), 100),
    "native_country_x_occupation": (("native_country", "occupation"), 1000),
    "age_x_gender_x_hours": (("age_bucket", "gender", "hours_bucket"), 500),
}
HOURS_BOUNDARIES = (20.0, 35.0, 40.0, 41.0, 50.0, 60.0)
# Capital gains and losses act through thresholds (tax brackets), which buckets let a linear part use.
GAIN_BOUNDARIES = (1.0, 3000.0, 4000.0, 5000.0, 6000.0, 7000.0, 7500.0, 10000.0, 15000.0, 30000.0, 99999.0)
LOSS_BOUNDARIES = (1.0, 1500.0, 1800.0, 1900.0, 2000.0, 2200.0, 2500.0)
MAX_NUMERIC_BINS = 256
# id input -> (raw numeric column, bucket boundaries)
BUCKETS: dict[str, tuple[str, tuple[float, ...]]] = {
    "age_bucket": ("age", AGE_BOUNDARIES),
    "hours_bucket": ("hours_per_week", HOURS_BOUNDARIES),
    "gain_bucket": ("capital_gain", GAIN_BOUNDARIES),
    "loss_bucket": ("capital_loss", LOSS_BOUNDARIES),
}


@dataclass(frozen=True)
class CensusConfig(TaskConfig):
    """The Wide & Deep model's own flags (``--embedding-size`` ...); defaults tuned on the UCI split."""

    embedding_size: int = option(8, "width of categorical embeddings (default %(default)s)")
    first_layer_size: int = option(128, "width of the first hidden layer (default %(default)s)")
    num_layers: int = option(3, "number of hidden layers (default %(default)s)")
    scale_factor: float = option(0.5,
                                 "each hidden layer is this times the previous one (default %(default)s)")
    dropout: float = option(0.1, "dropout rate after each hidden layer (default %(default)s)")
    numeric_bins: int = option(
        64, "piecewise-linear encoding of each numeric column over this many quantile bins of the training "
            "data (fewer where values repeat), fed to both parts; 0: only the normalised value "
            "(default %(default)s)", metavar="N", type=integral)
    numeric_embedding_size: int = option(
        16, "width of each numeric column's embedding of its encoding in the deep part (default %(default)s)",
        type=integral)
    max_bad_rows: int = option(
        0, "skip and report up to N malformed rows or rows with an implausible value (outside the task's "
           "plausible range for the column, or not finite) instead of stopping at the first (default 0)",
        metavar="N")

    def validate(self) -> None:
        for name in ("embedding_size", "first_layer_size", "num_layers"):
            check(getattr(self, name) >= 1, name, "a positive integer", getattr(self, name))
        check(self.max_bad_rows >= 0, "max_bad_rows", "an integer >= 0", self.max_bad_rows)
        check(0 <= self.numeric_bins <= MAX_NUMERIC_BINS, "numeric_bins", f"an integer from 0 to "
              f"{MAX_NUMERIC_BINS}", self.numeric_bins)
        check(self.numeric_embedding_size >= 1, "numeric_embedding_size", "a positive integer",
              self.numeric_embedding_size)
        check(0 < self.scale_factor <= 1, "scale_factor", "in (0, 1]", self.scale_factor)
        check(0 <= self.dropout < 1, "dropout", "in [0, 1)", self.dropout)

    def layer_sizes(self) -> tuple[int, ...]:
        """Hidden layer widths of the deep part: ``max(2, int(first_layer_size * scale_factor**i))``."""
        return tuple(
            max(2, int(self.first_layer_size * self.scale_factor**i)) for i in range(self.num_layers)
        )

    def hparams(self) -> dict[str, object]:
        keys = ("embedding_size", "first_layer_size", "num_layers", "scale_factor", "dropout", "numeric_bins",
                "numeric_embedding_size")
        return {k: getattr(self, k) for k in keys}


SPEC = TaskSpec(
    name="wide_deep",
    description="UCI Adult census income, Wide & Deep binary classifier",
    config=CensusConfig,
    metrics={"accuracy": MAXIMIZE, "auc": MAXIMIZE, "loss": MINIMIZE},
    export_formats={"JSON": "raw feature dict", "CSV": "a raw data line", "EXAMPLE": "serialized tf.Example"},
    # Tuned on the UCI split (scripts/benchmarks/bench_trainer_quality.py): larger batches and a higher rate
    # than the generic defaults, with the cosine decay below.
    defaults={"num_epochs": 8, "train_batch_size": 256, "eval_batch_size": 1024, "learning_rate": 0.003},
    flag_help={"learning_rate": "Adam learning rate (default %(default)s)"},
)


def _preprocessor_class():
    import keras
    import tensorflow as tf

    class CensusPreprocessor(keras.layers.Layer):
        """Raw census features -> integer ids for the wide/deep inputs plus a normalised numeric matrix."""

        def __init__(self, stats: dict[str, tuple[float, float]],
                     edges: dict[str, tuple[float, ...]] | None = None, **kwargs):
            super().__init__(**kwargs)
            self.stats = {k: tuple(v) for k, v in stats.items()}
            # numeric column -> its piecewise-linear encoding's bin edges (training quantiles), if any
            self.edges = {k: tuple(v) for k, v in (edges or {}).items()}
            self.lookups = {
                name: keras.layers.StringLookup(vocabulary=list(vocab), num_oov_indices=1, name=f"{name}_ids")
                for name, vocab in VOCABULARIES.items()
            }
            self.buckets = {name: keras.layers.Discretization(bin_boundaries=list(bounds), name=name)
                            for name, (_, bounds) in BUCKETS.items()}
            self.crosses = {name: keras.layers.HashedCrossing(num_bins=bins, name=name)
                            for name, (_, bins) in CROSSES.items()}
            # Statistics come from the data scan; plain constants (not a Normalization layer) because
            # the layer would build its state lazily inside the tf.data graph.
            self.mean = [self.stats[n][0] for n in NUMERIC]
            self.std = [max(self.stats[n][1], 1e-12) ** 0.5 for n in NUMERIC]

        def call(self, features):
            ids = {name: lookup(features[name]) for name, lookup in self.lookups.items()}
            for name, (column, _) in BUCKETS.items():
                ids[name] = self.buckets[name](tf.cast(features[column], tf.float32))
            for name, (inputs, _) in CROSSES.items():
                ids[name] = self.crosses[name](tuple(ids[i] for i in inputs))
            out = {name: tf.cast(t, tf.int64) for name, t in ids.items()}
            numeric = []
            for name in NUMERIC:
                value = tf.cast(features[name], tf.float32)
                if SCHEMA.column(name).transform == "log1p":
                    value = tf.math.log1p(tf.maximum(value, 0.0))
                numeric.append(value)
            out["numeric"] = (tf.stack(numeric, axis=-1) - tf.constant(self.mean)) / tf.constant(self.std)
            for name, value in zip(NUMERIC, numeric, strict=True):
                if name in self.edges:
                    out[f"ple_{name}"] = piecewise_linear(value, self.edges[name])
            return out

        def get_config(self):
            return {**super().get_config(), "stats": self.stats, "edges": self.edges}

    return CensusPreprocessor


def piecewise_linear(value, edges: tuple[float, ...]):
    """[batch] values -> [batch, len(edges) - 1]: per bin, 0 below it, 1 above it, the position inside it
    (Gorishniy et al. 2022, "On Embeddings for Numerical Features in Tabular Deep Learning"). The first bin
    continues below the training minimum and the last above the maximum, so no input is clipped away."""
    import tensorflow as tf

    left = tf.constant(edges[:-1], tf.float32)
    width = tf.constant([b - a for a, b in zip(edges, edges[1:], strict=False)], tf.float32)
    z = (value[:, None] - left) / width
    if len(edges) == 2:
        return z
    return tf.concat([tf.minimum(z[:, :1], 1.0), tf.clip_by_value(z[:, 1:-1], 0.0, 1.0),
                      tf.maximum(z[:, -1:], 0.0)], axis=1)


def numeric_edges(scan, bins: int) -> dict[str, tuple[float, ...]]:
    """Bin edges of each numeric column from the training scan: its minimum, its distinct inner quantiles
    and its maximum. A column with a single value gets no encoding."""
    edges = {}
    for name in NUMERIC:
        low, high = scan.value_range(name)
        inner = [q for q in scan.quantiles(name, bins) if low < q < high]
        if high > low:
            edges[name] = (low, *inner, high)
    return edges


def _id_inputs() -> dict[str, int]:
    """Integer-id model inputs and their vocabulary sizes (including the OOV index)."""
    sizes = {name: len(vocab) + 1 for name, vocab in VOCABULARIES.items()}
    sizes.update({name: len(bounds) + 1 for name, (_, bounds) in BUCKETS.items()})
    sizes.update({name: bins for name, (_, bins) in CROSSES.items()})
    return sizes


def make_data(cfg, global_train_batch: int, global_eval_batch: int,
              shard: Shard = UNSHARDED) -> TaskData:
    train_files = expand_files(cfg.train_files, "--train-files")
    eval_files = expand_files(cfg.eval_files, "--eval-files")
    # Each worker scans its own share; counts, statistics and bad rows are the whole data's (see
    # trainer.sharding).
    bad = cfg.task.max_bad_rows
    keeper = ScanKeeper(shard.cache_dir) if shard.cache_dir else None  # for the job's other trials/restarts
    train_share, train_scan, train_keep = scan_share(train_files, SCHEMA, shard, max_bad_rows=bad,
                                                     flag="--train-files", every_share=True, keeper=keeper)
    eval_share, eval_scan, eval_keep = scan_share(eval_files, SCHEMA, shard, max_bad_rows=bad,
                                                  flag="--eval-files", keeper=keeper)
    if keeper:
        keeper.flush()  # both splits were accepted
    # Every statistic of the preprocessing (means, variances, bin edges) comes from the training split only.
    edges = numeric_edges(train_scan, cfg.task.numeric_bins) if cfg.task.numeric_bins else {}
    preprocessor = _preprocessor_class()(train_scan.stats, edges, name="census_preprocessor")

    def transform(features, label):
        return preprocessor(features), label

    # Cached only when the preprocessed rows (mostly the float encodings: ~1.4 KB a row, ten times the
    # text) fit the memory budget; otherwise each epoch parses the text again.
    budget = cache_budget(cfg.cache_limit_mb)
    train = text_dataset(train_share, SCHEMA, batch_size=global_train_batch, transform=transform,
                         cache=budget, shuffle=True, seed=cfg.seed, repeat=cfg.steps_per_epoch is not None,
                         keep=train_keep, sharded=shard.sharded)
    evaluation = text_dataset(eval_share, SCHEMA, batch_size=global_eval_batch, transform=transform,
                              cache=budget, keep=eval_keep, sharded=shard.sharded)
    report = {
        split: {"files": list(scan.files), "rows": scan.rows, "positives": scan.positives,
                "skipped_rows": [str(b) for b in scan.bad_rows], "skipped": scan.bad_counts()}
        for split, scan in (("train", train_scan), ("eval", eval_scan))
    }
    report["summary"] = f"train: {train_scan.summary()}; eval: {eval_scan.summary()}"
    if shard.sharded:
        report["shard"] = {"index": shard.index, "count": shard.count, "by_record": train_keep[1] > 1,
                           "train_records": train_share.rows, "eval_records": eval_share.rows}
        train_steps = -(-train_scan.rows // global_train_batch)
    else:
        train_steps = count_batches(train_scan, global_train_batch)
    return TaskData(train=train, eval=evaluation, train_rows=train_scan.rows, eval_rows=eval_scan.rows,
                    train_steps=train_steps, preprocessor=preprocessor, report=report, state={"edges": edges})


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
        probability = tf.reshape(model(preprocessor(features), training=False), [-1])
        class_id = tf.cast(probability > 0.5, tf.int64)
        return {"probability": probability, "class_id": class_id,
                "label": tf.gather(tf.constant(LABELS), class_id)}

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


TASK = Task(spec=SPEC, make_data=make_data, build_model=build_model, serving_fn=serving_fn)
