"""The trainer's import rules, read from its source (tests/import_graph.py): no circle among its modules
(imports inside functions count), no module using another's private names, and no import of the repo's other
layers (the trainer is installed and run without them)."""

from __future__ import annotations

from tests.helpers import REPO_ROOT
from tests.import_graph import cycles, import_graph, imports, modules, private_uses

TRAINER = REPO_ROOT / "trainer"
OTHER_LAYERS = {"infra", "jobs", "scripts", "serving", "tests"}


def test_the_trainer_import_graph_has_no_circle():
    assert cycles(import_graph(TRAINER)) == []


def test_no_trainer_module_uses_another_modules_private_names():
    assert private_uses(TRAINER) == []


def test_the_trainer_imports_none_of_the_other_layers():
    found = {(name, base) for name, path in modules(TRAINER).items() for base, _ in imports(name, path)
             if base.split(".")[0] in OTHER_LAYERS}
    assert found == set()


def test_the_rules_see_circles_inside_functions_and_private_names(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("from pkg.a import run\n")
    (package / "a.py").write_text("from pkg import b\n\ndef run():\n    return b._helper()\n")
    (package / "b.py").write_text("def _helper():\n    from pkg.a import run\n    return run\n")
    (package / "c.py").write_text("from pkg.b import _helper\n")
    # pkg.a's import of its sibling is no edge to pkg's __init__, which imports pkg.a.
    assert cycles(import_graph(package)) == [["pkg.a", "pkg.b"]]
    assert private_uses(package) == ["pkg.a: b._helper", "pkg.c: from pkg.b import _helper"]
