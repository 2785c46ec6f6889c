"""The real ``google.cloud.aiplatform_v1`` message classes, at a fraction of the package's import cost.

``import google.cloud.aiplatform_v1`` spends about 1.2 s importing every service client (gRPC, REST, asyncio
transports) before the first message class is usable; the two job types themselves take about 60 ms. Their
modules only need the package *paths*, so while loading them we register bare package modules and then take
them out again: a later ``import google.cloud.aiplatform_v1`` (when submitting) runs the real ``__init__`` and
reuses the very same type modules, so classes stay identical. If anything about that layout changes, the full
import is used instead: slower, never wrong.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types

from jobs.definition.kinds import JOB_KINDS, KINDS, RESOURCE_KINDS, JobKind

_PACKAGE = "google.cloud.aiplatform_v1"
_TYPES = _PACKAGE + ".types"


def job_message_class(kind: str) -> type:
    """The proto-plus class of a job ``kind`` (a name in jobs.definition.kinds)."""
    return job_message_classes()[KINDS.index(kind)]


def job_message_classes() -> tuple[type, ...]:
    """Each kind's proto-plus class, in KINDS order (CustomJob, HyperparameterTuningJob): the kinds' table
    names the class (the kind) and its module (``types.<sdk>``)."""
    return _message_classes(tuple(JOB_KINDS.values()))


def resource_message_class(kind: str) -> type:
    """The proto-plus class of any resource the cloud client creates (a job kind, a BatchPredictionJob)."""
    return _message_classes((RESOURCE_KINDS[kind],))[0]


def _message_classes(rows: tuple[JobKind, ...]) -> tuple[type, ...]:
    if _PACKAGE not in sys.modules:
        try:
            return _light_import(rows)
        except Exception:  # noqa: BLE001 - any surprise in the package layout: fall back to the full import
            for name in [n for n in sys.modules if n == _PACKAGE or n.startswith(_PACKAGE + ".")]:
                if not isinstance(getattr(sys.modules[name], "__file__", None), str):
                    del sys.modules[name]
    return _classes(rows)


def _classes(rows: tuple[JobKind, ...]) -> tuple[type, ...]:
    return tuple(getattr(importlib.import_module(f"{_TYPES}.{k.sdk}"), k.name) for k in rows)


def _light_import(rows: tuple[JobKind, ...]) -> tuple[type, ...]:
    spec = importlib.util.find_spec(_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(_PACKAGE)
    root = list(spec.submodule_search_locations)[0]
    stubs = {_PACKAGE: [root], _TYPES: [root + "/types"]}
    for name, path in stubs.items():
        module = types.ModuleType(name)
        module.__path__ = path
        sys.modules[name] = module
    try:
        classes = _classes(rows)
    finally:
        for name in stubs:
            sys.modules.pop(name, None)
        # The import system bound the stub as an attribute of google.cloud; left there, a later
        # `from google.cloud import aiplatform_v1` would return the stub instead of importing the package.
        parent = sys.modules.get("google.cloud")
        if (
            parent is not None
            and getattr(parent, "aiplatform_v1", None) is not None
            and not hasattr(parent.aiplatform_v1, "__file__")
        ):
            delattr(parent, "aiplatform_v1")
    return classes
