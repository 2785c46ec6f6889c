"""The models ``--model`` names, a package each, and where they live.

``trainer/models/<package>/__init__.py`` defines ``TASK``, a :class:`trainer.models.base.Task`: its
spec (flags, metrics and their goals, export formats, default overrides) plus the data, model and export
hooks. Importing it must not import
TensorFlow (TensorFlow is imported inside the hooks), so the job tooling reads every task's spec cheaply.
Adding a model means writing its package under ``trainer/models/`` (its ``data`` and ``model`` modules hold
its input pipelines and networks) and adding one line here.
"""

from __future__ import annotations

import importlib

# name -> module that defines TASK
TASK_MODULES: dict[str, str] = {
    "wide_deep": "trainer.models.census",
    "image_classifier": "trainer.models.image_classifier",
    "recommender": "trainer.models.recommender",
}
# --model when a command line names none (the census task, as before tasks had their own flags).
DEFAULT_MODEL = "wide_deep"


def models() -> tuple[str, ...]:
    """The registered ``--model`` names, read when asked (a test may register a task for its duration)."""
    return tuple(TASK_MODULES)


def load_task(name: str):
    """Import and return the registered task called ``name`` (without TensorFlow: its hooks import it)."""
    try:
        module_name = TASK_MODULES[name]
    except KeyError:
        raise KeyError(f"unknown model {name!r}; registered: {', '.join(sorted(TASK_MODULES))}") from None
    task = importlib.import_module(module_name).TASK
    if task.name != name:
        raise RuntimeError(f"{module_name}.TASK is named {task.name!r}, registered as {name!r}")
    return task


def load_spec(name: str):
    """The :class:`trainer.models.base.TaskSpec` of the registered task ``name``."""
    return load_task(name).spec
