"""Registered tasks. Each module defines ``TASK`` (its spec and hooks, see :mod:`trainer.tasks.base`) and
imports no TensorFlow at its top level; :mod:`trainer.registry` lists them by ``--model`` name."""
