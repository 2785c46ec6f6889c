"""Registered tasks (``--model`` names), listed without importing them.

A task module defines ``TASK``, a :class:`trainer.tasks.base.Task` with the data, model and export
hooks. Adding a model means writing that module and adding one line here; ``trainer.config.MODELS`` is
derived from this table so the job tooling sees the name without importing TensorFlow.
"""

from __future__ import annotations

import importlib

# name -> module that defines TASK
TASK_MODULES: dict[str, str] = {
    "wide_deep": "trainer.tasks.census",
}


def load_task(name: str):
    """Import and return the registered task called ``name`` (imports TensorFlow)."""
    try:
        module_name = TASK_MODULES[name]
    except KeyError:
        raise KeyError(f"unknown model {name!r}; registered: {', '.join(sorted(TASK_MODULES))}") from None
    task = importlib.import_module(module_name).TASK
    if task.name != name:
        raise RuntimeError(f"{module_name}.TASK is named {task.name!r}, registered as {name!r}")
    return task
