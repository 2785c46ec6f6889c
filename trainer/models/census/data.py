"""Census data: the UCI Adult CSV schema with its plausible ranges, the feature definitions (vocabularies,
buckets, crosses, numeric columns), the preprocessing layer (with the piecewise-linear encodings of the
numeric columns) and the validated tf.data pipelines of ``make_data``.

Preprocessing (vocabulary lookups, bucketising, crossing, normalising) is a Keras layer that runs in the
tf.data pipeline during training, so it is computed once and cached in memory and never sits in the training
step (which is also what TPUs need), and is put back in front of the model for export. TensorFlow is
imported inside the functions: the task package imports this module for its hooks.
"""

from __future__ import annotations

from trainer.csv_dataset import count_batches, text_dataset
from trainer.csv_scan import ScanCache, scan_share
from trainer.csv_schema import Column, CsvSchema
from trainer.input_files import cache_budget, expand_files
from trainer.models.base import TaskData
from trainer.result_cache import may_claim
from trainer.sharding import UNSHARDED, Shard

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
# id input -> (raw numeric column, bucket boundaries)
BUCKETS: dict[str, tuple[str, tuple[float, ...]]] = {
    "age_bucket": ("age", AGE_BOUNDARIES),
    "hours_bucket": ("hours_per_week", HOURS_BOUNDARIES),
    "gain_bucket": ("capital_gain", GAIN_BOUNDARIES),
    "loss_bucket": ("capital_loss", LOSS_BOUNDARIES),
}

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



def make_data(cfg, global_train_batch: int, global_eval_batch: int,
              shard: Shard = UNSHARDED) -> TaskData:
    train_files = expand_files(cfg.train_files, "--train-files")
    eval_files = expand_files(cfg.eval_files, "--eval-files")
    # Each worker scans its own share; counts, statistics and bad rows are the whole data's (see
    # trainer.sharding).
    bad = cfg.task.max_bad_rows
    # Cached on disk for the job's other trials and restarts; a scan another trial is computing is waited for.
    scans = ScanCache(shard.cache_dir, claim=may_claim(shard)) if shard.cache_dir else None
    train_share, train_scan, train_keep = scan_share(train_files, SCHEMA, shard, max_bad_rows=bad,
                                                     flag="--train-files", every_share=True, scan_cache=scans)
    eval_share, eval_scan, eval_keep = scan_share(eval_files, SCHEMA, shard, max_bad_rows=bad,
                                                  flag="--eval-files", scan_cache=scans)
    # Every statistic of the preprocessing (means, variances, bin edges) comes from the training split only.
    edges = numeric_edges(train_scan, cfg.task.numeric_bins) if cfg.task.numeric_bins else {}
    preprocessor = _preprocessor_class()(train_scan.stats, edges, name="census_preprocessor")

    def transform(features, label):
        return preprocessor(features), label

    # Cached in memory only when the preprocessed rows (mostly the float encodings: ~1.4 KB a row, ten times
    # the text) fit the memory budget; otherwise each epoch parses the text again.
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
                    train_steps=train_steps, preprocessor=preprocessor, report=report, state={"edges": edges},
                    write_cache=scans.flush if scans else None)
