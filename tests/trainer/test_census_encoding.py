"""The census task's numeric encoding: bin edges from the training split's quantiles (a repeated value such as
capital gains' zeros gets its own edge) and the piecewise-linear encoding the model and the export share."""

from __future__ import annotations

import numpy as np
import pytest

from tests.trainer.helpers import CENSUS
from trainer.csv_scan import QUANTILE_SAMPLE, ScanResult, scan_csv
from trainer.models.census.data import NUMERIC, SCHEMA, numeric_edges, piecewise_linear

tf = pytest.importorskip("tensorflow")


def scan_of(**samples) -> ScanResult:
    return ScanResult(files=("f",), total_lines=1, rows=1, positives=0, total_bytes=1,
                      excluded=np.array([], dtype=np.int64),
                      samples={k: np.asarray(v, dtype=np.float64) for k, v in samples.items()})


def test_quantile_edges_and_a_value_that_fills_bins_on_its_own():
    scan = scan_of(uniform=np.arange(101), zeros=[0.0] * 90 + list(range(1, 11)), few=[1, 1, 2, 2, 3, 3])
    assert scan.quantiles("uniform", 4) == (25.0, 50.0, 75.0)
    # 90% zeros would put every inner quantile at 0: zero is one edge, the other values get the quantiles.
    assert scan.quantiles("zeros", 4) == (0.0, 3.25, 5.5, 7.75)
    # Only the most common value (the first of equals) is taken out; repeats give distinct edges.
    assert scan.quantiles("few", 4) == (1.0, 2.0, 2.5, 3.0)


def test_edges_come_from_the_training_scan_only(tmp_path):
    train = scan_csv([str(CENSUS / "adult.data")], SCHEMA)
    test = scan_csv([str(CENSUS / "adult.test")], SCHEMA)
    edges, other = numeric_edges(train, 64), numeric_edges(test, 64)
    assert set(edges) == set(NUMERIC) and edges != other
    for name, e in edges.items():
        low, high = train.value_range(name)
        assert e[0] == low and e[-1] == high and list(e) == sorted(set(e))
        assert 2 <= len(e) <= 65
    # Capital gains: mostly zeros, still many bins over the rest (log1p scale, as the model sees them).
    assert edges["capital_gain"][:2] == (0.0, edges["capital_gain"][1]) and len(edges["capital_gain"]) > 30
    assert train.samples["age"].size == train.rows <= QUANTILE_SAMPLE


def test_the_reservoir_keeps_a_bounded_uniform_sample(tmp_path, monkeypatch):
    import trainer.csv_scan

    monkeypatch.setattr(trainer.csv_scan, "QUANTILE_SAMPLE", 1000)
    scan = scan_csv([str(CENSUS / "adult.data")], SCHEMA)
    ages = scan.samples["age"]
    assert ages.size == 1000
    # A uniform sample of 32,561 ages: its median is the data's within sampling error.
    full = scan_csv([str(CENSUS / "adult.test")], SCHEMA).samples["age"]
    assert abs(np.median(ages) - np.median(full)) <= 2
    assert np.array_equal(ages, scan_csv([str(CENSUS / "adult.data")], SCHEMA).samples["age"])  # seeded


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (-5.0, [-0.5, 0.0, 0.0]),  # below the training minimum: the first bin keeps going
        (0.0, [0.0, 0.0, 0.0]),
        (5.0, [0.5, 0.0, 0.0]),
        (10.0, [1.0, 0.0, 0.0]),
        (15.0, [1.0, 0.5, 0.0]),
        (30.0, [1.0, 1.0, 0.5]),
        (60.0, [1.0, 1.0, 2.0]),  # above the maximum: the last bin keeps going
    ],
)
def test_piecewise_linear_encoding(value, expected):
    encoded = piecewise_linear(tf.constant([value]), (0.0, 10.0, 20.0, 40.0))
    np.testing.assert_allclose(encoded.numpy(), [expected], atol=1e-6)


def test_one_bin_is_a_scaled_value():
    encoded = piecewise_linear(tf.constant([-1.0, 3.0]), (1.0, 5.0))
    np.testing.assert_allclose(encoded.numpy(), [[-0.5], [0.5]])


def test_the_task_fits_its_encoding_on_the_training_files_and_exports_it(census_slice, tmp_path):
    """make_data's edges are the training scan's, whatever the eval files hold, and the preprocessor that
    the export keeps in front of the model carries them (serving sees raw inputs)."""
    from trainer.config import resolve_config
    from trainer.models.census.data import make_data

    def data_with(eval_file):
        cfg = resolve_config(["--model", "wide_deep", "--train-files", str(census_slice["train"]),
                              "--eval-files", str(eval_file), "--job-dir", str(tmp_path / "job")])
        return make_data(cfg, 64, 64)

    data = data_with(census_slice["eval"])
    expected = numeric_edges(scan_csv([str(census_slice["train"])], SCHEMA), 64)
    assert data.state["edges"] == expected
    assert data.preprocessor.get_config()["edges"] == expected
    assert data_with(CENSUS / "adult.test").state["edges"] == expected
    features, _ = next(iter(data.train))
    assert {f"ple_{n}" for n in NUMERIC} <= set(features)
    assert features["ple_age"].shape[1] == len(expected["age"]) - 1
