"""The validating scan of delimited text: every row checked before training, counted, and summed into the
statistics the model needs.

Bad rows are found by :func:`scan_csv`, one pass over the raw lines before training starts (vectorised in
NumPy a block of lines at a time, on several cores, with the per-line validator wording every bad row; see
:mod:`trainer.csv_rows`): malformed and implausible rows (:mod:`trainer.csv_schema`). It names the file and
line of the first bad row (or counts and reports up to ``--max-bad-rows`` skipped ones), counts the data
rows and computes the normalisation statistics and quantile samples the model needs, so a bad file stops
the run before anything is written. The lines to leave out (comments, blank lines, skipped bad rows) are
the scan's ``excluded`` line numbers, which :func:`trainer.csv_dataset.text_dataset` drops. At most
MAX_NON_DATA_LINES blank or comment lines are left out (each is a position the pipeline drops).

Under sharding each worker scans its share and the workers combine what they found (:func:`scan_share`);
completed scans are cached on disk for the job's other trials and restarts (:class:`ScanCache`,
:mod:`trainer.result_cache`).
"""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from trainer import result_cache
from trainer.csv_rows import FastPath, Validator, blocks
from trainer.csv_schema import IMPLAUSIBLE, BadRow, CsvSchema, TooManyBadRows, too_many
from trainer.input_files import DataError, name_files, unreadable
from trainer.sharding import empty_share

# The most lines a scan leaves out that are not data (blank or comment lines): each is kept as a position
# for the pipeline to drop (8 MB at the limit); a file of a billion blank lines is refused at this one.
MAX_NON_DATA_LINES = 1_000_000
# Rows sampled per numeric column for quantiles (ScanResult.quantiles): exact below it, uniform above.
QUANTILE_SAMPLE = 100_000


@dataclass(frozen=True)
class ScanResult:
    files: tuple[str, ...]
    total_lines: int  # every line TextLineDataset will yield, data or not
    rows: int  # data rows the pipeline will deliver
    positives: int
    total_bytes: int
    excluded: np.ndarray  # sorted global 0-based line indices the pipeline must leave out
    bad_rows: tuple[BadRow, ...] = ()  # malformed and implausible rows skipped under --max-bad-rows
    stats: dict[str, tuple[float, float]] = field(default_factory=dict)  # numeric column -> (mean, variance)
    # numeric column -> a uniform sample of its (transformed) values, at most QUANTILE_SAMPLE of them
    samples: dict[str, np.ndarray] = field(default_factory=dict)

    def quantiles(self, name: str, count: int) -> tuple[float, ...]:
        """Distinct inner `count`-quantiles of column `name`, as bin edges. If the most common value fills
        more than a bin on its own (capital gains: 92% zeros), it is an edge by itself and the quantiles are
        taken over the other values, so the rest of the range still gets its bins."""
        sample = self.samples[name]
        values, counts = np.unique(sample, return_counts=True)
        edges = []
        if counts.max() * count > len(sample) and len(values) > 1:
            mode = values[np.argmax(counts)]
            edges.append(mode)
            sample = sample[sample != mode]
        edges.extend(np.quantile(sample, np.linspace(0, 1, count + 1)[1:-1]))
        return tuple(float(q) for q in np.unique(edges))

    def value_range(self, name: str) -> tuple[float, float]:
        return float(np.min(self.samples[name])), float(np.max(self.samples[name]))

    def summary(self) -> str:
        text = f"{self.rows} rows from {len(self.files)} file(s)"
        if self.bad_rows:
            shown = "; ".join(str(b) for b in self.bad_rows[:3])
            more = f" (+{len(self.bad_rows) - 3} more)" if len(self.bad_rows) > 3 else ""
            counts = self.bad_counts()
            text += (f", skipped {len(self.bad_rows)} bad row(s) ({counts['malformed']} malformed, "
                     f"{counts['implausible']} implausible): {shown}{more}")
        return text

    def bad_counts(self) -> dict[str, int]:
        implausible = sum(b.reason.startswith(IMPLAUSIBLE) for b in self.bad_rows)
        return {"malformed": len(self.bad_rows) - implausible, "implausible": implausible}



class _Sample:
    """A uniform sample without replacement of at most ``size`` rows (the rows with the smallest random
    keys from a seeded generator: the same rows in the same files give the same sample), kept in memory
    whatever the data size."""

    def __init__(self, size: int, columns: int):
        self.size = size
        self.rng = np.random.default_rng(0)
        self.keys = np.empty(0)
        self.values = np.empty((0, columns))

    def add(self, values: np.ndarray) -> None:
        keys = np.concatenate((self.keys, self.rng.random(len(values))))
        values = np.concatenate((self.values, values))
        if len(keys) > self.size:
            keep = np.argpartition(keys, self.size)[:self.size]
            keys, values = keys[keep], values[keep]
        self.keys, self.values = keys, values


def scan_csv(files: Sequence[str], schema: CsvSchema, *, max_bad_rows: int = 0, flag: str = "",
             keep: tuple[int, int] = (0, 1), require_rows: bool = True, sample_size: int | None = None,
             scan_cache: ScanCache | None = None) -> ScanResult:
    """Validate every line of ``files``; raise TooManyBadRows (a DataError) at the first bad row beyond
    ``max_bad_rows``.

    Malformed and implausible rows share the ``max_bad_rows`` budget: both are left out of the pipeline, the
    statistics and the row count, and listed in ``bad_rows``. ``keep=(i, n)``: only the lines whose index
    (counted over all ``files``) is ``i`` modulo ``n`` are this scan's; the others are neither checked nor
    counted (a worker's share when sharding by record, see trainer.sharding).

    With a ``scan_cache``, a completed scan is cached in its folder, keyed by the files' identity (path,
    size, modification time), the schema and the share; the job's later trials and restarts read it instead
    of the data, and refuse or skip the same bad rows with the same lines (a scan that stopped at a bad row is
    not cached, and nothing is written before ``scan_cache.flush()``).
    """
    if scan_cache is None:
        return _scan_files(files, schema, max_bad_rows=max_bad_rows, flag=flag, keep=keep,
                           require_rows=require_rows, sample_size=sample_size)
    size = QUANTILE_SAMPLE if sample_size is None else sample_size
    path = f"{scan_cache.folder}/{_scan_key(files, schema, keep, size, flag)}.npz"
    scan = _load_scan(path, files, claim=scan_cache.claim)
    if scan is None:
        scan = _scan_files(files, schema, max_bad_rows=max_bad_rows, flag=flag, keep=keep,
                           require_rows=require_rows, sample_size=size)
        scan_cache.pending.append((path, scan))
        return scan
    logging.getLogger("trainer").info("%s: read the scan of %d file(s) from %s", flag or "data", len(files),
                                      path)
    if len(scan.bad_rows) > max_bad_rows:
        raise too_many(scan.bad_rows, max_bad_rows)
    if scan.rows == 0 and require_rows:
        raise DataError(f"{flag + ': ' if flag else ''}no data rows in {name_files(files)}")
    return scan


@dataclass
class ScanCache:
    """Where completed scans are cached (trainer.sharding.Shard.cache_dir), and those still to write: a task
    writes them with :meth:`flush` once all its data was accepted, so bad data leaves nothing behind.
    ``claim``: a scan missed is claimed, and a run that misses one another run is scanning waits for it
    (trainer.result_cache; ``trainer.result_cache.may_claim(shard)``)."""

    folder: str
    claim: bool = False
    pending: list[tuple[str, ScanResult]] = field(default_factory=list)

    def flush(self) -> None:
        for path, scan in self.pending:
            _save_scan(path, scan)
        self.pending.clear()


_MAX_CACHED_SCAN_BYTES = 1 << 30  # a cached scan holds a bounded sample and the excluded lines' positions
_SCAN_FORMAT = 1  # bump when what a scan checks or caches changes: older cached scans are then not read


def _scan_key(files: Sequence[str], schema: CsvSchema, keep: tuple[int, int], sample_size: int,
              flag: str) -> str:
    import tensorflow as tf

    identity = []
    for path in files:
        try:
            identity += result_cache.files_identity([path])
        except tf.errors.OpError as exc:
            raise unreadable(path, exc, flag) from None
    return result_cache.key(_SCAN_FORMAT, repr(schema), list(keep), sample_size, identity)


def _load_scan(path: str, files: Sequence[str], *, claim: bool = False) -> ScanResult | None:
    """A cached scan, or None when there is none or it cannot be read (then the data is scanned again; with
    ``claim``, under this run's claim: see trainer.result_cache)."""
    raw = result_cache.read(path, _MAX_CACHED_SCAN_BYTES, "scan", claim=claim)
    if raw is None:
        return None
    try:
        cached = np.load(io.BytesIO(raw), allow_pickle=False)
        meta = json.loads(cached["meta"].tobytes())
        samples = cached["samples"]
        return ScanResult(
            files=tuple(files), total_lines=meta["total_lines"], rows=meta["rows"],
            positives=meta["positives"], total_bytes=meta["total_bytes"], excluded=cached["excluded"],
            bad_rows=tuple(BadRow(*b) for b in meta["bad_rows"]),
            stats={k: tuple(v) for k, v in meta["stats"].items()},
            samples={name: samples[:, k].copy() for k, name in enumerate(meta["names"])})
    except result_cache.DECODE_ERRORS as exc:
        logging.getLogger("trainer").warning("not reading the cached scan %s (%s): scanning the data", path,
                                             exc)
        return None


def _save_scan(path: str, scan: ScanResult) -> None:
    """Cache ``scan`` at ``path`` (see trainer.result_cache.write)."""
    names = list(scan.samples)
    meta = {"rows": scan.rows, "positives": scan.positives, "total_lines": scan.total_lines,
            "total_bytes": scan.total_bytes, "stats": scan.stats, "names": names,
            "bad_rows": [[b.file, b.line, b.reason] for b in scan.bad_rows]}
    samples = np.stack([scan.samples[n] for n in names], axis=1) if names else np.empty((0, 0))
    buffer = io.BytesIO()
    np.savez(buffer, meta=np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8),
             excluded=scan.excluded, samples=samples)
    result_cache.write(path, buffer.getvalue(), "data scan")


def _scan_files(files: Sequence[str], schema: CsvSchema, *, max_bad_rows: int, flag: str,
                keep: tuple[int, int], require_rows: bool, sample_size: int | None) -> ScanResult:
    """scan_csv without the cached scans: rows are checked a block at a time by
    :class:`~trainer.csv_rows.FastPath`, and line by line only where it declines."""
    import tensorflow as tf

    v, fast = Validator(schema), FastPath(schema)
    index_of, count_of = keep
    numeric = [c.name for c in schema.columns if c.numeric]
    sample = _Sample(QUANTILE_SAMPLE if sample_size is None else sample_size, len(numeric))
    sums, squares = np.zeros(len(numeric)), np.zeros(len(numeric))
    excluded: list[np.ndarray] = []
    bad: list[BadRow] = []
    index = rows = positives = total_bytes = non_data = 0
    for path in files:
        try:
            total_bytes += tf.io.gfile.stat(path).length
        except tf.errors.OpError as exc:
            raise unreadable(path, exc, flag) from None
        number = 0  # lines of this file before the block
        for block, count, data, starts, ends, verdict, skip in blocks(path, flag, fast, len(numeric),
                                                                      v.comment):
            good, labels, values = verdict
            mine = (index + data) % count_of == index_of
            good &= mine
            if count_of > 1:
                skip = skip[(index + skip) % count_of == index_of]
            if non_data + len(skip) > MAX_NON_DATA_LINES:
                line = number + int(skip[MAX_NON_DATA_LINES - non_data]) + 1
                raise DataError(f"{path}:{line}: more than {MAX_NON_DATA_LINES} blank or comment lines in "
                                f"{flag or 'the data'} (each is a position to leave out of every epoch): "
                                "remove them")
            non_data += len(skip)
            # Only the data lines the fast path declined: bad rows, or good rows it does not parse.
            for j in np.flatnonzero(mine & ~good).tolist():
                line = block[starts[j]:ends[j]]
                result = v.check(line)
                if isinstance(result, str):
                    bad.append(BadRow(path, number + int(data[j]) + 1, result))
                    if len(bad) > max_bad_rows:
                        raise too_many(bad, max_bad_rows)
                else:
                    good[j] = True
                    labels[j], values[j] = result
            rows += int(good.sum())
            positives += int(labels[good].sum())
            kept = values[good]
            sums += kept.sum(axis=0)
            squares += (kept * kept).sum(axis=0)
            sample.add(kept)
            left_out = np.zeros(count, dtype=bool)  # this share's non-data and bad lines, in line order
            left_out[skip] = True
            left_out[data[mine & ~good]] = True
            excluded.append(index + np.flatnonzero(left_out))
            index += count
            number += count
    if rows == 0 and require_rows:
        raise DataError(f"{flag + ': ' if flag else ''}no data rows in {name_files(files)}")
    stats = {}
    for k, name in enumerate(numeric):
        mean = sums[k] / rows if rows else 0.0
        stats[name] = (float(mean), max(float(squares[k] / rows - mean * mean), 0.0) if rows else 0.0)
    return ScanResult(
        files=tuple(files), total_lines=index, rows=rows, positives=positives, total_bytes=total_bytes,
        excluded=np.concatenate(excluded or [np.empty(0, np.int64)]).astype(np.int64), bad_rows=tuple(bad),
        stats=stats, samples={name: sample.values[:, k].copy() for k, name in enumerate(numeric)},
    )


def scan_share(files: Sequence[str], schema: CsvSchema, shard, *, max_bad_rows: int = 0, flag: str = "",
               every_share: bool = False,
               scan_cache: ScanCache | None = None) -> tuple[ScanResult, ScanResult, tuple[int, int]]:
    """(this worker's scan, the whole data's, ``keep``) under ``shard`` (a trainer.sharding.Shard).

    Each worker scans only its share (its files, or with fewer files than workers its lines by position:
    ``keep``); the counts, statistics, quantile samples and bad rows are then combined over the cluster, so
    every worker builds the same preprocessing, refuses the same bad data with the same line, and the
    scan's time per worker falls with the number of workers. The whole data's ScanResult has no
    ``excluded`` lines (those are per share). Unsharded, both scans are the same one. ``every_share``: each
    worker's share must hold data rows (training repeats each share; an empty one never yields a batch).
    """
    if not shard.sharded:
        scan = scan_csv(files, schema, max_bad_rows=max_bad_rows, flag=flag, scan_cache=scan_cache)
        return scan, scan, (0, 1)
    mine, by_record = shard.files(files, flag)
    keep = (shard.index, shard.count) if by_record else (0, 1)
    part: dict = {"error": None, "bad": []}
    local = None
    try:
        local = scan_csv(mine, schema, max_bad_rows=max_bad_rows, flag=flag, keep=keep, require_rows=False,
                         sample_size=QUANTILE_SAMPLE // shard.count, scan_cache=scan_cache)
        part.update(rows=local.rows, positives=local.positives, bytes=local.total_bytes,
                    bad=[[b.file, b.line, b.reason] for b in local.bad_rows],
                    stats={k: list(v) for k, v in local.stats.items()},
                    samples={k: v.tolist() for k, v in local.samples.items()})
    except TooManyBadRows as exc:
        part["bad"] = [[b.file, b.line, b.reason] for b in exc.bad_rows]
    except DataError as exc:
        part["error"] = str(exc)
    parts = shard.exchange(part)  # every worker, also one whose share failed: the others wait for it
    for other in parts:
        if other["error"]:
            raise DataError(other["error"])
    order = {path: i for i, path in enumerate(files)}
    bad = sorted((BadRow(*b) for other in parts for b in other["bad"]), key=lambda b: (order[b.file], b.line))
    if len(bad) > max_bad_rows:  # each share stops at its first row over the budget: the union holds ours
        raise too_many(bad, max_bad_rows)
    rows = sum(other["rows"] for other in parts)
    if rows == 0:
        raise DataError(f"{flag + ': ' if flag else ''}no data rows in {name_files(files)}")
    empty = empty_share([other["rows"] for other in parts], files, flag, "data rows") if every_share else None
    if empty:  # the same line on every worker, from the exchanged counts (see trainer.sharding.empty_share)
        raise DataError(empty)
    names = [c.name for c in schema.columns if c.numeric]
    stats = {}
    for name in names:  # per share (mean, variance) back to sums, added up
        total = sum(p["stats"][name][0] * p["rows"] for p in parts)
        squares = sum((p["stats"][name][1] + p["stats"][name][0] ** 2) * p["rows"] for p in parts)
        stats[name] = (total / rows, max(squares / rows - (total / rows) ** 2, 0.0))
    whole = ScanResult(files=tuple(files), total_lines=0, rows=rows,
                       positives=sum(other["positives"] for other in parts),
                       total_bytes=sum(other["bytes"] for other in parts), excluded=np.empty(0, np.int64),
                       bad_rows=tuple(bad), stats=stats, samples=_merge_samples(parts, names))
    return local, whole, keep


def _merge_samples(parts: list[dict], names: list[str]) -> dict[str, np.ndarray]:
    """One uniform sample of the whole data from each share's: from every share the same fraction of its
    rows (the largest that all shares' samples can give), chosen at random with a fixed seed."""
    rng = np.random.default_rng(0)
    shares = [p for p in parts if p["rows"]]
    fraction = min(len(p["samples"][names[0]]) / p["rows"] for p in shares) if names else 0.0
    merged: dict[str, list[np.ndarray]] = {name: [] for name in names}
    for p in shares:
        size = len(p["samples"][names[0]]) if names else 0
        pick = rng.choice(size, size=min(size, round(fraction * p["rows"])), replace=False)
        for name in names:
            merged[name].append(np.asarray(p["samples"][name], dtype=np.float64)[pick])
    return {name: np.concatenate(values) for name, values in merged.items()}
