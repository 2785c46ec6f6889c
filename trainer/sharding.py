"""Which share of the input this process reads, and how workers agree on what they learnt from their shares.

Under ``MultiWorkerMirroredStrategy`` every worker runs its own input pipeline. tf.data's automatic sharding
policy DATA makes each of them read, parse and decode *all* the data and throw away the other workers'
share, so adding workers adds no input throughput. Tasks shard explicitly instead (auto-sharding is turned
off with :func:`dataset_options`):

- **by file** when there are at least as many files as workers: worker ``i`` of ``n`` reads files ``i, i+n,
  i+2n, ...`` and nothing else (bytes read, parsed and decoded: about ``1/n``);
- **by record** otherwise (the documented fallback): every worker reads the files' bytes but keeps only
  every ``n``-th record *before* parsing or decoding it, and a one-line warning says how many files the data
  needs to shard by file.

One epoch is one pass over the data across all workers: a task's ``train_steps`` counts global batches of
all workers' records together, and under sharding the training loop repeats each worker's shard and runs
exactly that many steps, so workers with unequal shares never wait for each other at the end of an epoch.

What a task must know before training (row counts, statistics, vocabularies, classes) is computed by each
worker over its own shard only, then combined with :meth:`Shard.exchange`, an all-gather over the
cluster's collectives: every worker ends up with the same preprocessing and counts, and the pre-training
work per worker falls with the number of workers.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from trainer.input_files import DataError, name_files

log = logging.getLogger("trainer")


@dataclass(frozen=True)
class Shard:
    """This process's input pipeline: ``index`` of ``count`` (one per training worker)."""

    index: int = 0
    count: int = 1
    # bytes -> every worker's bytes in index order (a collective all-gather); None in a one-worker run.
    gather: Callable[[bytes], list[bytes]] | None = None
    # Where a task may cache what it learnt from its share (trainer.result_cache, e.g. trainer.csv_scan's
    # scans) for the job's other trials and for a restart; None: nowhere.
    cache_dir: str | None = None

    def __post_init__(self):
        if not 0 <= self.index < self.count:
            raise ValueError(f"shard index {self.index} outside 0..{self.count - 1}")

    @property
    def sharded(self) -> bool:
        return self.count > 1

    def exchange(self, value) -> list:
        """``value`` (JSON-serialisable) from every worker, in worker order; ``[value]`` when unsharded.
        Every worker must call it the same number of times, in the same order (it is a collective)."""
        if not self.sharded:
            return [value]
        payload = json.dumps(value, separators=(",", ":"), allow_nan=True).encode()
        return [json.loads(raw) for raw in self.gather(payload)]

    def files(self, files: Sequence[str], flag: str) -> tuple[tuple[str, ...], bool]:
        """(the files this worker reads, whether it must also keep only every ``count``-th record).

        Sorted file lists are dealt round-robin, so similar-sized shards of one export spread evenly."""
        files = tuple(files)
        if not self.sharded:
            return files, False
        if len(files) >= self.count:
            if len(files) % self.count:
                log.warning("%s: %d files for %d workers: some workers read one file more than others (a "
                            "multiple of %d files balances them)", flag, len(files), self.count, self.count)
            return files[self.index::self.count], False
        log.warning("%s: %d file(s) for %d workers: every worker reads all the bytes and keeps one "
                    "record in every %d; split the data into at least %d files (a multiple of %d) so each "
                    "worker reads only its own files", flag, len(files), self.count, self.count, self.count,
                    self.count)
        return files, True

    def require_records(self, records: int, files: Sequence[str], flag: str, what: str = "records") -> None:
        """Refuse the run (``input_files.DataError``, the same line on every worker) when any worker's share
        of a training split holds no ``records``: a collective, every worker calls it before training."""
        if not self.sharded:
            return
        message = empty_share(self.exchange(records), files, flag, what)
        if message:
            raise DataError(message)


def empty_share(counts: Sequence[int], files: Sequence[str], flag: str, what: str = "records",
                by_record: bool | None = None) -> str | None:
    """The one-line refusal when a worker's share of a training split holds no ``what`` (``counts``: every
    worker's, in worker order, as exchanged), or None when every share holds some.

    Why refuse rather than train: a worker with nothing to train on has no batch for the first step while
    the others wait for it in the step's collectives, and the job dies with a collective's traceback or
    hangs (measured: the image classifier). Falling back to sharding by record would mean rebuilding every
    worker's share from a second scan; a Vertex AI user is better served by a line that says, before
    anything is written, which worker's files are empty and what would work. ``by_record``: every worker
    reads all ``files`` and keeps every n-th record (default: when there are fewer files than workers, as
    :meth:`Shard.files` deals them)."""
    count = len(counts)
    empty = [i for i, n in enumerate(counts) if not n]
    if not empty:
        return None
    files, worker = tuple(files), empty[0]
    if by_record is None:
        by_record = len(files) < count
    if by_record:
        return (f"{flag}: worker {worker + 1} of {count} has no {what} of its own: each worker keeps one "
                f"in every {count} of the {sum(counts)} {what} in {name_files(files)}; give at least "
                f"{count} {what}, or fewer workers")
    return (f"{flag}: worker {worker + 1} of {count} has no {what} in its share of the files "
            f"({name_files(files[worker::count])}): each worker trains on its own files, so give at least "
            f"{count} files with {what} (a multiple of {count} files of similar sizes), or fewer workers")


UNSHARDED = Shard()


def shard_for(strategy, kind: str, cache_dir: str | None = None) -> Shard:
    """The Shard of this process under ``strategy`` (created by trainer.env.make_strategy as ``kind``)."""
    if kind != "multi_worker":
        return Shard(cache_dir=cache_dir)
    resolver = strategy.cluster_resolver
    count = strategy.extended._num_workers  # noqa: SLF001 - the strategy's own count of input pipelines
    # The strategy numbers its workers chief first, then the workers (the order of its collectives).
    chief = "chief" in resolver.cluster_spec().jobs
    index = 0 if resolver.task_type == "chief" else resolver.task_id + chief
    return Shard(index=index, count=count, gather=lambda payload: _all_gather(strategy, payload),
                 cache_dir=cache_dir)


def _all_gather(strategy, payload: bytes) -> list[bytes]:
    """Every worker's ``payload``, in worker order, over the strategy's collectives (int64 words: the
    collective ops take no uint8)."""
    import numpy as np
    import tensorflow as tf

    local = len(strategy.extended.worker_devices)  # each worker's replicas all contribute the same row

    def gathered(value):
        per_replica = strategy.experimental_distribute_values_from_function(lambda _: value)
        return strategy.gather(per_replica, axis=0).numpy()[::local]

    lengths = gathered(tf.constant([len(payload)], tf.int64))
    width = -(-int(lengths.max()) // 8) * 8
    words = np.frombuffer(payload.ljust(width, b"\0"), dtype=np.int64)
    rows = gathered(tf.constant(words[None, :]))
    return [row.tobytes()[:length] for row, length in zip(rows, lengths.tolist(), strict=True)]


def dataset_options(shuffle: bool):
    """tf.data options for a task's pipeline: sharding is the task's own (see the module docstring), and no
    autotuning thread (below)."""
    import tensorflow as tf

    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    options.deterministic = not shuffle
    # Deleting an autotuned iterator (Keras drops the training one as fit returns) joins tf.data's model
    # thread, and that thread can miss the cancellation: Model::OptimizeLoop re-checks IsCancelled() when the
    # cancel callback wakes it, before CancellationManager::StartCancel has set that flag, and sleeps out its
    # optimisation period (it doubles, up to 60 s) while the process sits idle (issue 26). Without autotuning
    # an AUTOTUNE parallelism is fixed at its initial value, min(initial_parallelism, tf.data's threads):
    # every core (tf.data's default of 16 would leave a 96-vCPU machine's JPEG decoding at 16 threads). The
    # steady rates were no lower here.
    return _untuned(options)


def _untuned(options):
    import os

    options.autotune.enabled = False
    # The cores this process may run on (taskset, a container's cpuset), not the machine's.
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    options.autotune.initial_parallelism = max(1, cores or 1)
    return options


# Batches a task's pipeline prefetches. Without autotuning, prefetch(AUTOTUNE)'s own tuner doubles its buffer
# whenever the consumer finds it empty, with no memory budget (measured: +430 MB of float images for a fast
# consumer of a 244 MB in-memory cache); a fixed buffer, behind maps that already run in parallel, keeps the
# step fed.
PREFETCH_BATCHES = 2


def untuned(ds):
    """``ds`` without tf.data's autotuning thread, all else as it was: for the pipelines a task iterates
    itself before training (the image checks), whose iterators are deleted the same way (see
    :func:`dataset_options`)."""
    import tensorflow as tf

    return ds.with_options(_untuned(tf.data.Options()))
