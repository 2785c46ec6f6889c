"""The training loop shared by every task: strategy, data, model, callbacks, fit, evaluate, export."""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
from dataclasses import dataclass, field

from trainer.config import TrainerConfig
from trainer.contract import CONFIG_FILE, METRICS_FILE
from trainer.env import Cluster, OutputDirs, data_cache_dir, trial_id

log = logging.getLogger("trainer")
# When the trainer's modules were first imported: the "imports" phase runs from here to the first data work.
STARTED = time.perf_counter()


@dataclass
class RunResult:
    metrics: dict[str, float]
    history: list[dict] = field(default_factory=list)
    initial_epoch: int = 0
    distribution: str = "default"
    replicas: int = 1
    train_seconds: float = 0.0
    exported_to: str | None = None


def peak_rss_mb() -> float:
    """This process's peak resident memory so far (Linux reports KiB, macOS bytes)."""
    import resource
    import sys

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1 << 20) if sys.platform == "darwin" else peak / 1024


def run(cfg: TrainerConfig, cluster: Cluster, dirs: OutputDirs) -> RunResult:
    """Train ``cfg.model`` and (on the chief) export it; raises DataError on bad data before writing, and
    Diverged (nothing exported) when the loss or the weights stop being finite."""
    # The strategy must exist before any other TensorFlow work (MultiWorkerMirroredStrategy requires it).
    from trainer.env import make_strategy

    strategy, kind = make_strategy(cfg.distribution, cluster)

    import keras

    from trainer import progress, result_cache
    from trainer.callbacks import (
        DivergenceGuard,
        EpochLogger,
        HParamsWriter,
        HypertuneReporter,
        PhaseTimer,
        PreemptionGuard,
        check_trained,
        read_backup_epoch,
    )
    from trainer.compat import fix_distributed_symbolic_build, fix_multi_worker_metric_reduction
    from trainer.export import export_saved_model, write_example_request, write_json, write_text
    from trainer.models import load_task
    from trainer.sharding import shard_for

    keras.utils.set_random_seed(cfg.seed)
    replicas = strategy.num_replicas_in_sync
    task = load_task(cfg.model)
    progress.configure(cluster.is_chief)
    progress.emit("start", model=cfg.model, epochs=cfg.num_epochs)
    shard = shard_for(strategy, kind, data_cache_dir(dirs))
    timings = {"imports_s": time.perf_counter() - STARTED}
    mark = time.perf_counter()
    try:
        data = task.make_data(cfg, cfg.train_batch_size * replicas, cfg.eval_batch_size * replicas, shard)
        steps_per_epoch = cfg.steps_per_epoch
        if replicas > 1 and steps_per_epoch is None:
            # Workers' shares differ by up to a file: each repeats its own and all run one epoch's global
            # steps (trainer.sharding), so none runs out while the others still wait on it in a collective.
            # One machine's replicas repeat too, for the full batches below.
            data.train, steps_per_epoch = data.train.repeat(), data.train_steps
        if replicas > 1 or kind == "tpu":
            # Every training batch a full global batch, a pass's last one completed from the next pass (a
            # rebatch moves slices of batches, nothing per record): tf.distribute cuts each batch into one
            # piece per replica, so a short last batch gives a replica an empty piece, and BatchNorm's
            # statistics of no images are NaN (measured: the image classifier on 2 replicas, 17 or 33
            # images and a global batch of 16, stopped as diverged; the same with a worker's share of 1 or
            # 17 images on 2 workers). TPUs also compile for static shapes (the census pipeline's batches
            # vary slightly where comment lines, blank lines or skipped rows were removed).
            data.train = data.train.rebatch(cfg.train_batch_size * replicas, drop_remainder=True)
        if kind == "tpu":
            data.eval = data.eval.rebatch(cfg.eval_batch_size * replicas, drop_remainder=True)
        timings["pre_training_s"] = time.perf_counter() - mark
        log.info("data: %s", data.report.get("summary", ""))
        progress.emit("stage", what="data", detail=data.report.get("summary", ""),
                      seconds=round(timings["pre_training_s"], 1))
        if "shard" in data.report:  # trainer.sharding: what this worker reads of the whole
            share = data.report["shard"]
            log.info("input: worker %d of %d reads %d of %d training records per epoch (%s)", share["index"],
                     share["count"], share["train_records"], data.train_rows,
                     "by record" if share["by_record"] else "by file")
        log.info("strategy: %s, %d replica(s), global batch %d; %s", kind, replicas,
                 cfg.train_batch_size * replicas, "chief" if cluster.is_chief else cluster.name)

        with strategy.scope():
            model = task.build_model(cfg, data)
        for text in data.report.get("notes", ()):  # what build_model found worth saying (random weights)
            progress.note(text)
        if data.write_cache:
            data.write_cache()
    finally:
        # Results this run claimed but did not cache (bad data refused, a model that failed to build, any
        # exception) are given up, so a trial waiting for one computes it itself (trainer.result_cache).
        # Several runs can share one interpreter (tests), where a claim left held would stall the next run's.
        result_cache.release_claims()
    if replicas > 1:
        fix_distributed_symbolic_build(model)
    if kind == "multi_worker":
        fix_multi_worker_metric_reduction()

    chief = cluster.is_chief
    scratch = None if chief else tempfile.mkdtemp(prefix=f"trainer-{cluster.name}-")
    # Each replica of a multi-worker job keeps its own backup (they hold the same synchronised weights) in a
    # sibling folder: BackupAndRestore deletes its folder when training ends, so nesting one replica's folder
    # in another's would let the first to finish delete a backup the other is still writing. Non-chief
    # TensorBoard logs and exports go to scratch space that is deleted.
    backup_dir = f"{dirs.checkpoints}/{cluster.name}" if cluster.is_multi_worker else dirs.checkpoints
    log_dir = dirs.logs if chief else f"{scratch}/logs"
    initial_epoch = read_backup_epoch(backup_dir)
    if initial_epoch:
        log.info("resuming at epoch %d from the backup in %s", initial_epoch, backup_dir)

    epoch_logger = EpochLogger(cfg.num_epochs)
    callbacks = [
        DivergenceGuard(cfg.num_epochs),  # first: a diverged epoch is neither backed up nor reported
        keras.callbacks.BackupAndRestore(backup_dir),
        keras.callbacks.TensorBoard(log_dir=log_dir, update_freq="epoch", write_graph=False),
        epoch_logger,
    ]
    if chief:
        callbacks.append(HParamsWriter(dirs.logs, cfg.hparams(), trial_id()))
        callbacks.append(HypertuneReporter(cfg.hypertune_metric))
    phases = PhaseTimer(cfg.train_batch_size * replicas)
    callbacks.append(phases)
    preemption = PreemptionGuard()
    callbacks.append(preemption)  # last: the epoch's backup and report happen before it stops

    started = time.perf_counter()
    try:
        model.fit(data.train, validation_data=data.eval, epochs=cfg.num_epochs,
                  steps_per_epoch=steps_per_epoch, validation_steps=cfg.eval_steps,
                  callbacks=callbacks, verbose=0, shuffle=False)
    finally:
        preemption.on_train_end()  # a callback that raised (Diverged) skips it: give SIGTERM back anyway
    train_seconds = time.perf_counter() - started
    mark = time.perf_counter()
    metrics = {k: float(v) for k, v in
               model.evaluate(data.eval, steps=cfg.eval_steps, return_dict=True, verbose=0).items()}
    timings["eval_s"] = time.perf_counter() - mark
    log.info("evaluation: %s", " ".join(f"{k}={v:.4f}" for k, v in sorted(metrics.items())))
    for name, figures in data.report.get("baselines", {}).items():  # what the model has to beat
        log.info("baseline %s on the same data: %s", name,
                 " ".join(f"{k}={v:.4f}" for k, v in sorted(figures.items())))
    check_trained(model, metrics)  # e.g. the very last step's update overflowed: no broken model is exported

    # Every replica saves (saving may run collectives), only the chief's copy is kept.
    target = dirs.model if chief else f"{scratch}/model"
    mark = time.perf_counter()
    export_saved_model(model, data, task, cfg.export_format, target)
    timings["export_s"] = time.perf_counter() - mark
    timings = {**{k: round(v, 3) for k, v in timings.items()}, **phases.figures(),
               "peak_rss_mb": round(peak_rss_mb(), 1)}
    log.info("phases: %s", " ".join(f"{k}={v}" for k, v in timings.items()))
    if chief:
        write_text(f"{target}/{CONFIG_FILE}", cfg.to_json())
        write_example_request(target)
        write_json(f"{target}/{METRICS_FILE}", {
            "eval": metrics, "history": epoch_logger.history, "data": data.report,
            "distribution": kind, "replicas": replicas, "train_seconds": round(train_seconds, 3),
            "phases": timings,
        })
        for name, text in (task.export_files(data) if task.export_files else {}).items():
            write_text(f"{target}/{name}", text)
        progress.emit("result", model_dir=target, eval=metrics, baselines=data.report.get("baselines") or {})
    else:
        shutil.rmtree(scratch, ignore_errors=True)
    return RunResult(metrics=metrics, history=epoch_logger.history, initial_epoch=initial_epoch,
                     distribution=kind, replicas=replicas, train_seconds=train_seconds,
                     exported_to=target if chief else None)

