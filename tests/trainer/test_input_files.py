"""trainer.csv_scan and trainer.csv_dataset on the real census files: scanning, malformed rows, and the
tf.data pipeline."""

from __future__ import annotations

import numpy as np
import pytest

from tests.trainer.helpers import CENSUS, damaged, write_slice
from trainer.csv_dataset import count_batches, text_dataset
from trainer.csv_scan import ScanCache, scan_csv
from trainer.csv_schema import Column, CsvSchema
from trainer.input_files import DataError, expand_files
from trainer.models.census.data import PLAUSIBLE, SCHEMA

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
    assert "skipped 2 bad row(s) (2 malformed, 0 implausible)" in scan.summary()
    assert f"{bad}:700" in scan.summary()
    with pytest.raises(DataError, match="more than --max-bad-rows 1 malformed or implausible rows"):
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


# --- implausible values: parse fine, would train silently into a useless model ---------------------------

def test_every_numeric_census_column_has_a_plausible_range_the_real_data_keeps():
    numeric = [c for c in SCHEMA.columns if c.numeric]
    assert {c.name for c in numeric} == set(PLAUSIBLE)
    assert all(c.plausible == PLAUSIBLE[c.name] for c in numeric)
    for name in ("adult.data", "adult.test"):  # every real row passes: bad rows would raise (max_bad_rows=0)
        assert scan_csv([str(CENSUS / name)], SCHEMA).bad_rows == ()
        rows = python_rows(CENSUS / name)
        for i, column in enumerate(SCHEMA.columns):
            if column.numeric:
                low, high = column.plausible
                assert sum(not low <= float(r[i]) <= high for r in rows) == 0, (name, column.name)


@pytest.mark.parametrize("old, new, column, allowed", [
    (b"39,", b"-9000000000000000000,", "age", "0..150"),  # fits int64: decode_csv parses it
    (b"39,", b"151,", "age", "0..150"),
    (b", 40,", b", 169,", "hours_per_week", "0..168"),
    (b", 13,", b", 31,", "education_num", "0..30"),
    (b", 2174,", b", 10000001,", "capital_gain", "0..10000000"),
    (b", 0, 40,", b", -1, 40,", "capital_loss", "0..10000000"),
    (b", 77516,", b", 100000001,", "fnlwgt", "0..100000000"),
])
def test_implausible_value_stops_the_scan_naming_all(tmp_path, census_slice, old, new, column, allowed):
    line = GOOD_LINE.replace(old, new, 1)
    assert line != GOOD_LINE
    bad = insert_line(census_slice["train"], tmp_path / "bad.data", 300, line)
    with pytest.raises(DataError) as err:
        scan_csv([str(bad)], SCHEMA, flag="--train-files")
    value = new.strip(b", ").split(b",")[0].decode()
    assert str(err.value) == (
        f"{bad}:300: implausible value: field '{column}': {value} is outside the plausible range {allowed} "
        "(use --max-bad-rows N to skip up to N malformed or implausible rows)")


def test_bounds_are_inclusive(tmp_path, census_slice):
    line = GOOD_LINE.replace(b"39,", b"150,").replace(b", 40,", b", 0,")
    scan = scan_csv([str(insert_line(census_slice["train"], tmp_path / "edge.data", 3, line))], SCHEMA)
    assert scan.rows == 2001 and scan.bad_rows == ()


FLOATS = CsvSchema(columns=(Column("x", "float", plausible=(0.0, 1.5)), Column("free", "float"),
                            Column("y", "str")), label="y", positive=("1",), negative=("0",))


@pytest.mark.parametrize("x, free, reason", [
    ("nan", "1", "field 'x': nan is not a finite number (plausible range 0..1.5)"),
    ("-Infinity", "1", "field 'x': -Infinity is not a finite number (plausible range 0..1.5)"),
    ("1.6", "1", "field 'x': 1.6 is outside the plausible range 0..1.5"),
    # A column without a declared range still refuses what is not finite: 1e999 overflows to inf.
    ("1", "1e999", "field 'free': 1e999 is not a finite number"),
    ("1", "NaN", "field 'free': NaN is not a finite number"),
    ("1", "inf", "field 'free': inf is not a finite number"),
])
def test_nan_and_inf_are_implausible(tmp_path, x, free, reason):
    path = tmp_path / "floats.csv"
    path.write_text(f"0.5,2,1\n{x},{free},0\n")
    # decode_csv parses every one of these into a float: only the scan stands between them and training.
    decoded = tf.io.decode_csv([f"{x},{free},0"], record_defaults=[[0.0], [0.0], [""]])
    assert not all(np.isfinite(t.numpy()).all() for t in decoded[:2]) or "outside" in reason
    with pytest.raises(DataError) as err:
        scan_csv([str(path)], FLOATS)
    assert str(err.value).startswith(f"{path}:2: implausible value: {reason} (use --max-bad-rows")


def test_plausible_range_must_be_sane():
    for bad in [(5, 1), (0, float("inf")), (float("nan"), 1)]:
        with pytest.raises(ValueError, match="bad plausible range"):
            Column("x", "int", plausible=bad)
    with pytest.raises(ValueError, match="bad plausible range"):
        Column("x", "str", plausible=(0, 1))


def test_implausible_rows_share_the_skip_policy_and_never_reach_the_pipeline(tmp_path, census_slice):
    clean = scan_csv([str(census_slice["train"])], SCHEMA)
    bad = insert_line(census_slice["train"], tmp_path / "bad.data", 10, GOOD_LINE.replace(b"39,", b"-9e18,"))
    bad = insert_line(bad, bad, 200, GOOD_LINE.replace(b"39,", b"-9000000000000000000,"))
    bad = insert_line(bad, bad, 700, GOOD_LINE.replace(b", 40,", b", 1000,"))
    scan = scan_csv([str(bad)], SCHEMA, max_bad_rows=3)
    assert scan.rows == 2000 and [b.line for b in scan.bad_rows] == [10, 200, 700]
    assert scan.bad_counts() == {"malformed": 1, "implausible": 2}  # -9e18 is not an integer: malformed
    assert str(scan.bad_rows[1]) == (f"{bad}:200: implausible value: field 'age': -9000000000000000000 is "
                                     "outside the plausible range 0..150")
    assert "skipped 3 bad row(s) (1 malformed, 2 implausible)" in scan.summary()
    assert scan.stats == clean.stats  # the skipped rows did not skew the normalisation statistics
    features, labels = collect(text_dataset(scan, SCHEMA, batch_size=64))
    assert len(labels) == 2000 and features["age"].min() >= 0 and features["hours_per_week"].max() <= 168
    clean_features = collect(text_dataset(clean, SCHEMA, batch_size=64))[0]
    np.testing.assert_array_equal(features["age"], clean_features["age"])
    with pytest.raises(DataError, match=r":700: implausible value: .*more than --max-bad-rows 2 malformed"):
        scan_csv([str(bad)], SCHEMA, max_bad_rows=2)


def _variants() -> list[bytes]:
    """Census lines good and bad in every way the block-at-a-time checks look at."""
    fields = GOOD_LINE.split(b",")
    lines = [GOOD_LINE, GOOD_LINE + b".", b"", b"   ", b"|a comment", b"  |indented", b"\t" + GOOD_LINE]
    for value in (b" -5", b"-5", b"+5", b" 05", b" 5 ", b" 5\t", b"5-", b"--5", b" - 5", b"", b" ", b" 1" * 3,
                  b" " + b"9" * 18, b" " + b"9" * 19, b" -" + b"9" * 18, b" 1e3", b" nan", b" 4\xc3\xa9",
                  b" 200", b" 0"):
        for column in (0, 10, 12):  # age (0..150), capital_gain (log1p), hours_per_week (0..168)
            lines.append(b",".join(fields[:column] + [value] + fields[column + 1:]))
    for label in (b" >50K", b" >50K.", b">50K", b" <=50K. ", b" >50K..", b" 50K", b" >50k", b" ", b' ">50K"',
                  b" >50K\r", b" " * 20 + b">50K"):
        lines.append(b",".join(fields[:-1] + [label]))
    lines += [GOOD_LINE.replace(b"State-gov", b" "), GOOD_LINE.replace(b"State-gov", b""),
              GOOD_LINE.replace(b"State-gov", b"\xff\xfe"), GOOD_LINE.replace(b", ", b","), GOOD_LINE + b",",
              GOOD_LINE.replace(b"State-gov", b"a\x0bb"), GOOD_LINE + b"\r", b",".join(fields[:-1])]
    return lines


def test_block_checks_agree_with_the_line_by_line_validator(tmp_path, monkeypatch):
    """Every line the vectorised checks accept is one the per-line validator accepts with the same label and
    values, and every other verdict (and reason) is the per-line validator's own."""
    import trainer.csv_rows
    import trainer.csv_scan

    lines = _variants()
    path = tmp_path / "variants.data"
    path.write_bytes(b"\n".join(lines * 3) + b"\n")
    fast = scan_csv([str(path)], SCHEMA, max_bad_rows=10_000)

    class LineByLine(trainer.csv_rows.FastPath):
        def __init__(self, schema):
            super().__init__(schema)
            self.usable = False

    monkeypatch.setattr(trainer.csv_scan, "FastPath", LineByLine)
    slow = scan_csv([str(path)], SCHEMA, max_bad_rows=10_000)
    assert 0 < fast.rows < len(lines) * 3 and fast.bad_rows
    assert (fast.rows, fast.positives, fast.total_lines) == (slow.rows, slow.positives, slow.total_lines)
    assert fast.excluded.tolist() == slow.excluded.tolist()
    assert fast.bad_rows == slow.bad_rows
    for name, stats in slow.stats.items():
        np.testing.assert_allclose(fast.stats[name], stats, rtol=1e-12)
        np.testing.assert_array_equal(np.sort(fast.samples[name]), np.sort(slow.samples[name]))


def test_a_scan_by_record_checks_and_counts_only_its_own_lines(tmp_path, census_slice):
    """keep=(i, n) is one worker's share when sharding by record: its lines are checked, the others are
    neither checked nor excluded (the pipeline drops them by position)."""
    bad = insert_line(census_slice["train"], tmp_path / "bad.data", 6, BAD_LINE)  # line index 5: odd
    whole = scan_csv([str(bad)], SCHEMA, max_bad_rows=1)
    even = scan_csv([str(bad)], SCHEMA, keep=(0, 2))
    odd = scan_csv([str(bad)], SCHEMA, keep=(1, 2), max_bad_rows=1)
    assert even.rows + odd.rows == whole.rows and even.bad_rows == () and len(odd.bad_rows) == 1
    assert set(even.excluded.tolist()) | set(odd.excluded.tolist()) == set(whole.excluded.tolist())
    assert all(i % 2 == 0 for i in even.excluded.tolist()) and all(i % 2 for i in odd.excluded.tolist())
    with pytest.raises(DataError, match=f"{bad}:6: malformed"):
        scan_csv([str(bad)], SCHEMA, keep=(1, 2))


def test_a_cached_scan_is_read_by_later_runs_until_the_files_change(tmp_path, census_slice, monkeypatch):
    import trainer.csv_scan

    data = tmp_path / "adult.data"
    data.write_bytes(census_slice["train"].read_bytes())
    folder = tmp_path / "scans"

    def scan(**kwargs):
        scans = ScanCache(str(folder))
        result = scan_csv([str(data)], SCHEMA, scan_cache=scans, **kwargs)
        assert not any(folder.glob("*.partial-*"))
        scans.flush()
        return result

    first = scan()
    (path,) = folder.iterdir()

    def no_scan(*args, **kwargs):
        raise AssertionError("scanned the data again")

    with monkeypatch.context() as m:
        m.setattr(trainer.csv_scan, "_scan_files", no_scan)
        again = scan()
    counts = ("rows", "positives", "total_lines")
    assert [getattr(again, k) for k in counts] == [getattr(first, k) for k in counts]
    assert again.stats == first.stats and again.excluded.tolist() == first.excluded.tolist()
    assert all(np.array_equal(again.samples[k], v) for k, v in first.samples.items())
    # Another share of the same files, or changed files, are scanned (and cached) anew.
    scan(keep=(1, 2))
    data.write_bytes(data.read_bytes() + GOOD_LINE + b"\n")
    assert scan().rows == first.rows + 1
    assert len(list(folder.iterdir())) == 3
    # A damaged cached scan is scanned again, with a warning, never trusted, and replaced.
    data.write_bytes(census_slice["train"].read_bytes())
    whole = path.read_bytes()
    for bad in damaged(whole):
        path.write_bytes(bad)
        assert scan().rows == first.rows
        assert path.read_bytes() == whole


def test_a_cached_scan_refuses_and_skips_the_same_bad_rows(tmp_path, census_slice):
    bad = insert_line(census_slice["train"], tmp_path / "bad.data", 300, BAD_LINE)
    scans = ScanCache(str(tmp_path / "scans"))
    with pytest.raises(DataError) as fresh:
        scan_csv([str(bad)], SCHEMA)
    assert scan_csv([str(bad)], SCHEMA, max_bad_rows=1, scan_cache=scans).bad_rows  # cached, with its bad row
    scans.flush()
    with pytest.raises(DataError) as reused:
        scan_csv([str(bad)], SCHEMA, scan_cache=scans)
    assert str(reused.value) == str(fresh.value)
    assert len(scan_csv([str(bad)], SCHEMA, max_bad_rows=5, scan_cache=scans).bad_rows) == 1


def test_a_place_the_job_cannot_write_costs_only_the_reuse(tmp_path, census_slice):
    blocked = tmp_path / "file"
    blocked.write_text("a file where the scans' folder would go")
    scans = ScanCache(str(blocked / "scans"))
    assert scan_csv([str(census_slice["train"])], SCHEMA, scan_cache=scans).rows == 2000
    scans.flush()  # a warning, not an error


def test_a_file_without_line_breaks_is_refused_without_reading_it_whole(tmp_path, monkeypatch):
    import trainer.input_files

    monkeypatch.setattr(trainer.input_files, "MAX_LINE_BYTES", 1 << 20)
    monkeypatch.setattr(trainer.input_files, "_BLOCK_BYTES", 1 << 16)
    path = tmp_path / "one.line"
    path.write_bytes(GOOD_LINE + b"\n" + b"9" * (3 << 20))
    with pytest.raises(DataError, match=rf"^{path}:2: malformed row: longer than 1048576 bytes"):
        scan_csv([str(path)], SCHEMA)
