"""Registered tasks. Each module defines ``TASK`` (see :mod:`trainer.tasks.base`); :mod:`trainer.registry`
lists them by ``--model`` name."""
