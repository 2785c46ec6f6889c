"""Entry point: train a registered model and export a SavedModel, locally or on Vertex AI.

Locally (outputs under <job-dir>/model, /checkpoints and /logs)::

    python -m trainer.task --model wide_deep \\
        --train-files data/census/adult.data --eval-files data/census/adult.test \\
        --job-dir /tmp/census-run --export-format JSON

``--model`` picks the task (see :mod:`trainer.models`); ``python -m trainer.task --model NAME --help`` lists
the generic flags plus NAME's own.

On Vertex AI the same command runs unchanged: outputs go to AIP_MODEL_DIR, AIP_CHECKPOINT_DIR and
AIP_TENSORBOARD_LOG_DIR, the cluster comes from TF_CONFIG/CLUSTER_SPEC, a tuning trial's parameters arrive as
``--<parameterId>=<value>`` (underscore spellings such as ``--first_layer_size`` are accepted) and the metric
named by ``--hypertune-metric`` is reported after every epoch. Re-running with the same arguments after a
preemption resumes from the last completed epoch.

Exit status: 0 done; 1 training diverged (the loss or the weights became NaN or infinite: one line on
stderr naming the epoch and step, nothing exported); 2 bad flags or bad input data, malformed or implausible
rows included (one line on stderr, nothing written); 143 stopped by SIGTERM (restart with the same arguments
to resume).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Sequence

from trainer.config import ConfigError, resolve_config
from trainer.contract import TRAINER_MODULE
from trainer.env import cluster_from_env, cpu_replicas, output_dirs
from trainer.input_files import DataError, expand_files

EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_PREEMPTED = 128 + 15

# TensorFlow's C++ log level for each --verbosity (set before TensorFlow is imported).
_TF_CPP_LEVEL = {"DEBUG": "0", "INFO": "2", "WARNING": "2", "ERROR": "3"}


def _configure_logging(verbosity: str) -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", _TF_CPP_LEVEL[verbosity])
    logging.basicConfig(level=verbosity, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    logging.getLogger("trainer").setLevel(verbosity)
    # TensorFlow's and absl's own INFO lines (under MirroredStrategy, a "Reduce to ..." per step function;
    # renamed inputs at export) drown the trainer's epoch lines; they show with --verbosity DEBUG.
    level = logging.getLevelName(verbosity)
    for name in ("tensorflow", "absl"):
        logging.getLogger(name).setLevel(level if level == logging.DEBUG else max(level, logging.WARNING))


def _usage_error(exc: Exception, status: int = EXIT_USAGE) -> int:
    prefix = f"{TRAINER_MODULE}: error: "
    message = str(exc)
    print(message if message.startswith(prefix) else prefix + message, file=sys.stderr)
    return status


def main(argv: Sequence[str] | None = None) -> int:
    try:
        cfg = resolve_config(argv)
        dirs = output_dirs(cfg.job_dir)
        cluster = cluster_from_env()
        cpu_replicas()  # the strategy reads it after TensorFlow's import: check it before, in seconds
        # Local files are checked before TensorFlow is imported (seconds); gs:// ones when they are read.
        expand_files(cfg.train_files, "--train-files")
        if cfg.eval_files:  # a task that splits --train-files itself may have none
            expand_files(cfg.eval_files, "--eval-files")
    except (ConfigError, DataError) as exc:
        return _usage_error(exc)
    _configure_logging(cfg.verbosity)
    log = logging.getLogger("trainer")

    from trainer import train
    from trainer.callbacks import Diverged, Preempted

    try:
        result = train.run(cfg, cluster, dirs)
    except (ConfigError, DataError) as exc:
        return _usage_error(exc)
    except Diverged as exc:
        return _usage_error(exc, EXIT_FAILED)
    except Preempted as exc:
        log.warning("stopped by SIGTERM (%s); the last completed epoch is backed up in %s: "
                    "run again with the same arguments to resume", exc, dirs.checkpoints)
        return EXIT_PREEMPTED
    log.info("done in %.1f s of training: %s", result.train_seconds,
             " ".join(f"{k}={v:.4f}" for k, v in sorted(result.metrics.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
