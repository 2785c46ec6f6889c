"""A package's imports read from its source with ast, for the tests that hold its layers to their rules
(tests/jobs/test_layers.py, tests/trainer/test_imports.py). Imports inside functions count as much as
module-level ones: a circle closed inside a function is still a circle, only deferred to the call."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path


def module_name(path: Path, root: Path) -> str:
    """``root/a/b.py`` -> ``a.b``; a package's ``__init__.py`` is the package itself."""
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(package: Path) -> dict[str, Path]:
    """Every module of ``package`` (a folder), by dotted name."""
    return {module_name(p, package.parent): p for p in sorted(package.rglob("*.py"))}


def imports(name: str, path: Path) -> Iterator[tuple[str, tuple[str, ...]]]:
    """(the module imported, the names taken from it: none for ``import m``) for every import statement of
    module ``name`` at ``path``, anywhere in it; relative imports made absolute."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, ()
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            yield base, tuple(a.name for a in node.names)


def import_graph(package: Path) -> dict[str, set[str]]:
    """Each module of ``package`` -> the package's modules it imports. ``from p import m`` is an edge to the
    module ``p.m`` where there is one, else to ``p``: a submodule's import of its sibling does not make it
    depend on what the package's ``__init__`` imports."""
    found = modules(package)
    graph = {}
    for name, path in found.items():
        targets = set()
        for base, names in imports(name, path):
            for n in names or ("",):
                targets.add(f"{base}.{n}" if f"{base}.{n}" in found else base)
        graph[name] = {t for t in targets if t in found and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def private_uses(package: Path) -> list[str]:
    """Where a module of ``package`` uses another module's private name (``_name``): ``from m import _name``,
    or ``m._name`` through a module it imported as ``m`` (``import p.m as m``, ``from p import m``)."""
    found = modules(package)
    uses = []
    for name, path in found.items():
        nodes = list(ast.walk(ast.parse(path.read_text(encoding="utf-8"))))
        # The names this module binds to other modules of the package.
        aliases = {a.asname for node in nodes if isinstance(node, ast.Import) for a in node.names
                   if a.asname and a.name in found}
        for base, names in imports(name, path):
            aliases.update(n for n in names if f"{base}.{n}" in found)
            uses.extend(f"{name}: from {base} import {n}" for n in names
                        if n.startswith("_") and base in found and base != name)
        uses.extend(f"{name}: {node.value.id}.{node.attr}" for node in nodes
                    if isinstance(node, ast.Attribute) and node.attr.startswith("_")
                    and not node.attr.startswith("__") and isinstance(node.value, ast.Name)
                    and node.value.id in aliases)
    return uses
