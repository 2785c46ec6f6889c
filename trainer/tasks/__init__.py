"""Registered tasks, a package each: ``trainer/tasks/<name>/__init__.py`` defines ``TASK`` (its spec and
hooks, see :mod:`trainer.tasks.base`) and imports no TensorFlow at its top level; the task's ``data`` and
``model`` modules beside it hold its input pipelines and networks. :mod:`trainer.registry` lists them by
``--model`` name."""
