"""trainer.data on the real census files: scanning, malformed rows, and the tf.data pipeline."""

from __future__ import annotations

import numpy as np
import pytest

from tests.trainer.helpers import CENSUS, write_slice
from trainer.data import DataError, count_batches, expand_files, scan_csv, text_dataset
from trainer.tasks.census import SCHEMA

tf = pytest.importorskip("tensorflow")

GOOD_LINE = (b"39, State-gov, 77516, Bachelors, 13, Never-married, Adm-clerical, Not-in-family, White, "
             b"Male, 2174, 0, 40, United-States, <=50K")
BAD_LINE = GOOD_LINE.replace(b"77516", b"not-a-number")


def python_rows(path) -> list[list[str]]:
    """Reference parse of a census file in plain Python."""
    rows = []
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("|"):
            rows.append([f.strip() for f in line.split(",")])
    return rows


def test_scan_full_files_as_they_are():
    train = scan_csv([str(CENSUS / "adult.data")], SCHEMA)
    test = scan_csv([str(CENSUS / "adult.test")], SCHEMA)
    assert (train.rows, test.rows) == (32561, 16281)
    assert (train.positives, test.positives) == (7841, 3846)  # ">50K" and ">50K." both count
    assert train.excluded.tolist() == [32561]  # the blank last line
    assert test.excluded.tolist() == [0, 16282]  # the banner and the blank last line
    mean, var = train.stats["age"]
    assert mean == pytest.approx(38.5816, abs=1e-3) and var > 0
    assert train.stats["capital_gain"][0] < 1.0  # log1p-transformed


def insert_line(src, dst, at: int, line: bytes):
    lines = src.read_bytes().split(b"\n")
    lines.insert(at - 1, line)
    dst.write_bytes(b"\n".join(lines))
    return dst


def test_malformed_row_names_file_and_line(tmp_path, census_slice):
    bad = insert_line(census_slice["train"], tmp_path / "bad.data", 300, BAD_LINE)
    with pytest.raises(DataError) as err:
        scan_csv([str(bad)], SCHEMA)
    message = str(err.value)
    assert f"{bad}:300:" in message and "fnlwgt" in message and "--max-bad-rows" in message
    assert "\n" not in message


@pytest.mark.parametrize("line, reason", [
    (b"39, State-gov, 77516", "expected 15 fields, got 3"),
    (GOOD_LINE.replace(b"<=50K", b"maybe"), "'income_bracket': 'maybe' is not one of <=50K, >50K"),
    (GOOD_LINE.replace(b"State-gov", b" "), "'workclass' is empty"),
    (GOOD_LINE.replace(b"77516", b'"7"'), "quote"),
    (GOOD_LINE.replace(b"77516", b"7.5"), "'fnlwgt': '7.5' is not an integer"),
    # decode_csv would fail on it mid-training, without a file or line
    (GOOD_LINE.replace(b"77516", b"9" * 20), "'fnlwgt': 99999999999999999999 is outside the int64"),
])
def test_malformed_row_reasons(tmp_path, census_slice, line, reason):
    bad = insert_line(census_slice["train"], tmp_path / "bad.data", 5, line)
    with pytest.raises(DataError, match=reason):
        scan_csv([str(bad)], SCHEMA)


def test_max_bad_rows_skips_counts_and_reports(tmp_path, census_slice):
    bad = insert_line(census_slice["train"], tmp_path / "bad.data", 10, BAD_LINE)
    bad = insert_line(bad, bad, 700, b"garbage")
    scan = scan_csv([str(bad)], SCHEMA, max_bad_rows=2)
    assert scan.rows == 2000 and [b.line for b in scan.bad_rows] == [10, 700]
    assert "skipped 2 malformed row(s)" in scan.summary() and f"{bad}:700" in scan.summary()
    with pytest.raises(DataError, match="more than --max-bad-rows 1"):
        scan_csv([str(bad)], SCHEMA, max_bad_rows=1)


def collect(ds):
    features, labels = {}, []
    for f, y in ds:
        labels.append(y.numpy())
        for k, v in f.items():
            features.setdefault(k, []).append(v.numpy())
    return {k: np.concatenate(v) for k, v in features.items()}, np.concatenate(labels)


@pytest.mark.parametrize("batch_size", [7, 64, 1000])
def test_pipeline_delivers_exactly_the_good_rows(tmp_path, census_slice, batch_size):
    # Two files (the test file's banner, bad rows across batch boundaries, blank last lines) via a glob.
    train = insert_line(census_slice["train"], tmp_path / "part-0.csv", 64, BAD_LINE)
    write_slice(CENSUS / "adult.test", tmp_path / "part-1.csv", 300, keep_banner=True)
    files = expand_files([str(tmp_path / "part-*.csv")], "--train-files")
    assert [f.rsplit("/", 1)[1] for f in files] == ["part-0.csv", "part-1.csv"]
    scan = scan_csv(files, SCHEMA, max_bad_rows=1)
    ds = text_dataset(scan, SCHEMA, batch_size=batch_size, cache=True)
    assert int(ds.cardinality()) == count_batches(scan, batch_size)
    features, labels = collect(ds)
    expected = [r for r in python_rows(train) if r[2] != "not-a-number"]
    expected += python_rows(tmp_path / "part-1.csv")
    assert len(labels) == scan.rows == len(expected) == 2300
    assert labels.tolist() == [float(r[14].rstrip(".") == ">50K") for r in expected]
    assert features["age"].tolist() == [int(r[0]) for r in expected]
    assert [v.decode() for v in features["native_country"]] == [r[13] for r in expected]
    assert int(labels.sum()) == scan.positives


def test_shuffled_training_pipeline_keeps_every_row(census_slice):
    scan = scan_csv([str(census_slice["train"])], SCHEMA)
    ds = text_dataset(scan, SCHEMA, batch_size=100, cache=True, shuffle=True, seed=1)
    first = collect(ds)[0]["fnlwgt"]
    second = collect(ds)[0]["fnlwgt"]
    assert sorted(first.tolist()) == sorted(second.tolist()) and len(first) == 2000
    assert first.tolist() != second.tolist()  # reshuffled every epoch


def test_non_local_filesystem_through_gfile(census_slice):
    # TensorFlow's ram:// filesystem stands in for gs://: same tf.io.gfile code path, no network.
    uri = "ram://bucket/census/adult.data"
    tf.io.gfile.makedirs("ram://bucket/census")
    tf.io.gfile.copy(str(census_slice["train"]), uri, overwrite=True)
    files = expand_files(["ram://bucket/census/*.data"], "--train-files")
    assert files == (uri,)
    scan = scan_csv(files, SCHEMA)
    assert scan.rows == 2000
    assert len(collect(text_dataset(scan, SCHEMA, batch_size=512))[1]) == 2000


def test_missing_files_are_named():
    with pytest.raises(DataError, match="--eval-files: no such file: /nonexistent/x-\\*.csv"):
        expand_files(["/nonexistent/x-*.csv"], "--eval-files")
    with pytest.raises(DataError, match="no such file: ram://nobucket/x.csv"):
        expand_files(["ram://nobucket/x.csv"], "--train-files")


def test_unreadable_file_is_one_line():
    # A listed gs:// object that vanished, or one without read access, fails the stat or the read.
    with pytest.raises(DataError, match=r"^--train-files: cannot read ram://nobucket/gone.csv: \S"):
        scan_csv(["ram://nobucket/gone.csv"], SCHEMA, flag="--train-files")


def test_file_without_data_rows(tmp_path):
    empty = tmp_path / "empty.csv"
    empty.write_text("|1x3 Cross validator\n\n")
    with pytest.raises(DataError, match="--train-files: no data rows"):
        scan_csv([str(empty)], SCHEMA, flag="--train-files")
