"""The jobs/ layers as jobs/__init__.py draws them: no import circle, no library module importing a command
line, no logic in a package's __init__, and each folder importing only the layers below it."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.import_graph import cycles
from tests.import_graph import import_graph as package_graph

JOBS = Path(__file__).resolve().parents[2] / "jobs"
# Each layer and the layers it may import (itself included); modules are named by their first folder/file.
ALLOWED = {
    "definition": {"definition"},
    "study_report": {"definition", "study_report"},
    "console": {"definition", "study_report", "console"},
    "cloud": {"definition", "study_report", "console", "cloud"},
    "local": {"definition", "study_report", "console", "local"},
    "legacy": {"definition", "legacy"},
    "api": {"definition", "study_report", "console", "cloud", "local", "legacy", "api"},
    "schedule": {"definition", "api", "schedule"},
    # The command lines go through the library entry point only: what they need of a layer below, api
    # re-exports (jobs.api.REEXPORTED).
    "cli": {"api", "cli"},
}


def import_graph() -> dict[str, set[str]]:
    """jobs.* module -> the jobs.* modules it imports (at module level or inside functions)."""
    return package_graph(JOBS)


def layer(module: str) -> str:
    return module.split(".")[1] if "." in module else ""


def test_the_jobs_import_graph_has_no_circle():
    assert cycles(import_graph()) == []


def test_no_library_module_imports_a_command_line():
    graph = import_graph()
    offenders = {(m, t) for m, ts in graph.items() for t in ts if layer(t) == "cli" and layer(m) != "cli"}
    assert offenders == set()


def test_each_layer_imports_only_the_layers_below_it():
    graph = import_graph()
    crossings = {
        (m, t)
        for m, ts in graph.items()
        for t in ts
        if layer(m) and layer(t) and layer(t) not in ALLOWED[layer(m)]
    }
    assert crossings == set()
    assert {layer(m) for m in graph} - {""} == set(ALLOWED)  # a new folder gets its row


def test_a_package_init_holds_a_docstring_and_nothing_else():
    for init in JOBS.rglob("__init__.py"):
        body = ast.parse(init.read_text(encoding="utf-8")).body
        assert len(body) <= 1 and all(isinstance(n, ast.Expr) for n in body), init


def test_every_name_a_command_line_takes_from_api_is_there():
    """The names cli imports from jobs.api exist, those re-exported on first use (REEXPORTED) included: a
    misspelt one would fail only when its command line reached it."""
    import jobs.api

    wanted = set()
    for path in (JOBS / "cli").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module == "jobs.api":
                wanted.update((path.name, a.name) for a in node.names)
    assert {"FLAGS", "JobError", "FollowInterrupted"} <= {name for _, name in wanted}
    assert [(file, name) for file, name in sorted(wanted) if not hasattr(jobs.api, name)] == []
    assert [name for name in jobs.api.REEXPORTED if not hasattr(jobs.api, name)] == []
