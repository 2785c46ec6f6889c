"""Prebuilt-like TensorFlow stacks for the trainer sdist: cached virtualenvs built with pip, as a user would.

A stack is a virtualenv holding only the TensorFlow/Keras of a Vertex AI prebuilt image (or of our TPU
image), built once and cached under ``~/.cache/vertex-tf-platform/compat/<name>-<key>`` (outside the
checkout, like pip's own cache, so every clone on a machine shares the same few GB; TRAINER_COMPAT_CACHE
moves it). The key hashes the
interpreter's exact version and the requirements and, for an open range such as ``keras>=3,<4``, the ISO
week: a new Keras release is picked up within a week at no cost per run (no index round-trip to decide
whether to rebuild), and the versions pip actually resolved are recorded in the stack's manifest and
printed with the results. A build happens in a temporary folder that is renamed into place only once
complete (manifest written last), so an interrupted build is never reused; a stack whose installed set no
longer matches its manifest is rebuilt.

The cached stack is never modified: each run installs the sdist into a throwaway virtualenv layered on it
(its site-packages chains to the stack's through a .pth file, like ``--system-site-packages`` does). pip
sees exactly the stack's installed set, as in the image, and anything it would upgrade is installed,
visibly, in the layer, which shadows the stack. Concurrent or interrupted test runs therefore never leave a
stack altered.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from tests.helpers import REPO_ROOT, RUNTIME_PREFIXES

_USER_CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
CACHE_ROOT = Path(os.environ.get("TRAINER_COMPAT_CACHE") or _USER_CACHE / "vertex-tf-platform" / "compat")
MANIFEST = "compat-manifest.json"
# Bump when the way stacks are built changes, so old caches are not reused.
BUILD_FORMAT = 1
# --no-compile: no .pyc for the thousands of modules nobody imports (TensorFlow's tests, tools); the few that
# the trainer imports are compiled on first use, once, into the cached stack.
PIP_INSTALL = ("-m", "pip", "install", "--no-compile", "--disable-pip-version-check")
PIP_TIMEOUT_S = 900
STALE_TMP_S = 6 * 3600


class CompatError(RuntimeError):
    """A stack could not be built or the sdist not installed, for a reason other than the network."""


class IndexUnreachable(CompatError):
    """pip failed and the package index cannot be reached: the stack cannot be built on this machine now."""


@dataclass(frozen=True)
class StackSpec:
    name: str
    python: str  # "3.10": the interpreter's minor version
    requirements: tuple[str, ...]
    export_format: str = "JSON"  # the serving signature this stack's census run exports and reloads
    # The models run after census: those whose jobs can meet this stack (the recommender's run the trainer
    # image, so they meet only the prebuilt images' TensorFlow through the sdist).
    models: tuple[str, ...] = ("image_classifier",)

    @property
    def floating(self) -> bool:
        """Whether a requirement is a range, i.e. may resolve to something new when a release comes out."""
        return any(not re.fullmatch(r"[A-Za-z0-9._-]+==[^,*;]+", req) for req in self.requirements)


@dataclass
class Stack:
    spec: StackSpec
    path: Path
    interpreter: Path  # the base interpreter the venv was made from
    manifest: dict
    note: str = ""  # why the interpreter differs from the spec's, if it does
    built_now: bool = False
    seconds: float = 0.0  # to build or verify it in this run

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"

    @property
    def dists(self) -> dict[str, str]:
        return self.manifest["dists"]


def lock_version(package: str) -> str:
    """The version Pipfile.lock pins ``package`` to (its [packages] section)."""
    pins = json.loads((REPO_ROOT / "Pipfile.lock").read_text())["default"]
    return pins[package]["version"].lstrip("=")


def is_watched(name: str) -> bool:
    """The image's TensorFlow stack: what installing the trainer must never replace."""
    return name in ("keras", "protobuf") or name.startswith(("tensorflow", "tensorboard"))


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without anything that would make a stack import from elsewhere (the
    checkout on PYTHONPATH, an active virtualenv) or change what the trainer does (Vertex AI's variables)."""
    dropped = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP")
    env = {k: v for k, v in os.environ.items() if k not in dropped and not k.startswith(RUNTIME_PREFIXES)}
    env.update(PYTHONNOUSERSITE="1", TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="",
               PIP_DISABLE_PIP_VERSION_CHECK="1")
    env.update(extra)
    return env


def _run(args: list, *, cwd: Path, timeout: float, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in args], cwd=cwd, env=env or clean_env(), capture_output=True,
                          text=True, timeout=timeout, check=False)


def _tail(proc: subprocess.CompletedProcess, chars: int = 3000) -> str:
    return (proc.stdout + proc.stderr)[-chars:]


# --- interpreters ------------------------------------------------------------------------------------------


def find_python(version: str) -> tuple[Path, str, str]:
    """An interpreter of ``version`` ("3.10") that runs: this one, a pyenv one or one on PATH (which may be
    a pyenv shim that refuses); else this one, with a note saying so (the stack is then still built and
    run, on another Python than the image's). Returns (interpreter, exact version, note)."""
    here = Path(getattr(sys, "_base_executable", sys.executable))
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    candidates = [here] if f"{sys.version_info[0]}.{sys.version_info[1]}" == version else []
    candidates += sorted(pyenv.glob(f"{version}.*/bin/python{version}"), reverse=True,
                         key=lambda p: [int(x) for x in re.findall(r"\d+", p.parts[-3])])
    candidates += [Path(found) for found in [shutil.which(f"python{version}")] if found]
    for candidate in candidates:
        exact = interpreter_version(candidate)
        if exact and exact.startswith(f"{version}."):
            return candidate, exact, ""
    return here, platform.python_version(), f"python{version} not found, used {platform.python_version()}"


def interpreter_version(python: Path) -> str | None:
    """The exact version of ``python``, or None when it does not run."""
    proc = _run([python, "-c", "import platform; print(platform.python_version())"],
                cwd=Path(tempfile.gettempdir()), timeout=60)
    return proc.stdout.strip() if proc.returncode == 0 else None


# --- the package index -------------------------------------------------------------------------------------


def index_error(timeout: float = 10.0) -> str | None:
    """Why pip's index cannot be reached, or None when it answers."""
    url = os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple/").rstrip("/") + "/pip/"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            response.read(1)
    except urllib.error.HTTPError:
        return None  # it answered
    except (urllib.error.URLError, OSError) as exc:
        return f"{url}: {getattr(exc, 'reason', exc)}"
    return None


def raise_pip_failure(what: str, proc: subprocess.CompletedProcess) -> None:
    """Turn a failed pip run into IndexUnreachable when the index is down, else into CompatError."""
    unreachable = index_error()
    if unreachable:
        raise IndexUnreachable(f"{what}: pip cannot reach the package index ({unreachable})")
    raise CompatError(f"{what} failed (exit {proc.returncode}):\n{_tail(proc)}")


# --- installed distributions -------------------------------------------------------------------------------

# Runs inside a stack or layer: every distribution on sys.path, the first of each name winning as it does for
# imports and importlib.metadata.version().
PROBE = r"""
import importlib.metadata, json, platform, re
dists = {}
for dist in importlib.metadata.distributions():
    name = dist.metadata["Name"]
    if name:
        dists.setdefault(re.sub(r"[-_.]+", "-", name).lower(), dist.version)
try:
    import trainer
    trainer_file = trainer.__file__
except ImportError:
    trainer_file = None
print(json.dumps({"python": platform.python_version(), "dists": dists, "trainer_file": trainer_file}))
"""


def probe(python: Path, cwd: Path) -> dict:
    proc = _run([python, "-c", PROBE], cwd=cwd, timeout=120)
    if proc.returncode != 0:
        raise CompatError(f"probing {python} failed:\n{_tail(proc)}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def changed(before: dict[str, str], after: dict[str, str]) -> dict[str, tuple[str, str | None]]:
    """Distributions of ``before`` whose version differs in ``after`` (None: gone)."""
    return {name: (version, after.get(name)) for name, version in sorted(before.items())
            if after.get(name) != version}


# --- stacks ------------------------------------------------------------------------------------------------


def cache_key(spec: StackSpec, python_version: str, today: datetime.date) -> str:
    payload = {"format": BUILD_FORMAT, "python": python_version, "requirements": list(spec.requirements),
               "pip": PIP_INSTALL}
    if spec.floating:
        year, week, _ = today.isocalendar()
        payload["week"] = f"{year}-W{week:02d}"
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:12]


def _complete(path: Path) -> dict | None:
    try:
        manifest = json.loads((path / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    return manifest if (path / "bin" / "python").exists() else None


def _build(spec: StackSpec, interpreter: Path, cache_root: Path) -> tuple[Path, dict]:
    """Build the stack in a temporary folder beside the cache; the caller renames it into place."""
    cache_root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{spec.name}-", dir=cache_root))
    try:
        # The stack's own pip (the interpreter's bundled one) installs, as the image's pip would.
        proc = _run([interpreter, "-m", "venv", "--clear", tmp], cwd=cache_root, timeout=300)
        if proc.returncode != 0:
            raise CompatError(f"creating the {spec.name} virtualenv failed:\n{_tail(proc)}")
        proc = _run([tmp / "bin" / "python", *PIP_INSTALL, *spec.requirements], cwd=cache_root,
                    timeout=PIP_TIMEOUT_S)
        if proc.returncode != 0:
            raise_pip_failure(f"building the {spec.name} stack ({' '.join(spec.requirements)})", proc)
        found = probe(tmp / "bin" / "python", cache_root)
        manifest = {"name": spec.name, "requirements": list(spec.requirements), "python": found["python"],
                    "interpreter": str(interpreter), "dists": found["dists"],
                    "built": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
        # Written last: its presence is what marks a stack complete.
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
        return tmp, manifest
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _prune(spec: StackSpec, keep: Path, cache_root: Path) -> None:
    """Drop this stack's other versions (a stack is over 1 GB) and temporary folders of dead builds."""
    for other in cache_root.glob(f"{spec.name}-*"):
        if other != keep and other.is_dir():
            shutil.rmtree(other, ignore_errors=True)
    for tmp in cache_root.glob(f".tmp-{spec.name}-*"):
        try:
            if time.time() - tmp.stat().st_mtime > STALE_TMP_S:
                shutil.rmtree(tmp, ignore_errors=True)
        except OSError:
            pass


def ensure_stack(spec: StackSpec, cache_root: Path = CACHE_ROOT, today: datetime.date | None = None) -> Stack:
    """The cached stack for ``spec``, built first if it is missing, incomplete or altered."""
    started = time.perf_counter()
    interpreter, exact, note = find_python(spec.python)
    key = cache_key(spec, exact, today or datetime.date.today())
    path = cache_root / f"{spec.name}-{key}"
    manifest = _complete(path)
    if manifest is not None and probe(path / "bin" / "python", cache_root)["dists"] != manifest["dists"]:
        manifest = None  # someone installed into it: build it anew rather than test an unknown stack
    built_now = manifest is None
    if built_now:
        if path.exists():  # incomplete or altered
            shutil.rmtree(path)
        tmp, manifest = _build(spec, interpreter, cache_root)
        try:
            # Atomic on one file system; a virtualenv survives the move because it is only ever run as
            # <stack>/bin/python (its console scripts keep the temporary path in their shebangs).
            os.rename(tmp, path)
        except OSError:
            # A concurrent run renamed its own build into place first: use that one.
            shutil.rmtree(tmp, ignore_errors=True)
            manifest = _complete(path)
            if manifest is None:
                raise
        _prune(spec, path, cache_root)
    return Stack(spec=spec, path=path, interpreter=Path(manifest["interpreter"]), manifest=manifest,
                 note=note, built_now=built_now, seconds=time.perf_counter() - started)


def make_layer(stack: Stack, dest: Path) -> Path:
    """A fresh virtualenv at ``dest`` whose site-packages chains to the stack's; returns its python."""
    proc = _run([stack.interpreter, "-m", "venv", "--without-pip", dest], cwd=dest.parent, timeout=120)
    if proc.returncode != 0:
        raise CompatError(f"creating a layer on {stack.spec.name} failed:\n{_tail(proc)}")
    python = dest / "bin" / "python"
    layer_site, stack_site = (_site_packages(p, dest.parent) for p in (python, stack.python))
    # addsitedir (not a bare path) so the stack's own .pth files are processed too, as in the stack itself.
    (layer_site / "_compat_stack.pth").write_text(f"import site; site.addsitedir({str(stack_site)!r})\n")
    return python


def _site_packages(python: Path, cwd: Path) -> Path:
    proc = _run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=cwd,
                timeout=60)
    if proc.returncode != 0:
        raise CompatError(f"{python}: no site-packages:\n{_tail(proc)}")
    return Path(proc.stdout.strip())


def install_sdist(python: Path, sdist: Path, cwd: Path, what: str) -> subprocess.CompletedProcess:
    """``pip install <sdist>``, what Vertex AI runs in the container for a python package spec."""
    proc = _run([python, "-m", "pip", "install", "--disable-pip-version-check", sdist], cwd=cwd,
                timeout=PIP_TIMEOUT_S)
    if proc.returncode != 0:
        raise_pip_failure(f"pip install of the trainer sdist into {what}", proc)
    return proc


# --- the run -----------------------------------------------------------------------------------------------

# Run in the layer, in a fresh process: reload a SavedModel with TensorFlow alone and score raw rows / images.
SCORE = REPO_ROOT / "tests" / "trainer" / "score_saved_model.py"
SCORE_IMAGES = REPO_ROOT / "tests" / "trainer" / "score_image_model.py"
SCORE_RECOMMENDER = REPO_ROOT / "tests" / "trainer" / "score_recommender.py"
# Runs those scripts one after another in one interpreter: a stack's exports are reloaded by one process.
SCORE_MANY = REPO_ROOT / "tests" / "trainer" / "score_many.py"
RATINGS = str(REPO_ROOT / "data" / "movielens" / "ratings.csv")
# The recommender trains on the shipped ratings' first 3,000 (20 users, 1,768 movies): a catalogue small
# enough that its item-item part (EASE's weights, a dense inverse) is a second, so the stack runs all of it.
RATINGS_HEAD, RATINGS_HEAD_ROWS = "<the first ratings>", 3000
# The image classifier trains on the shipped MNIST evaluation shard (2,000 PNGs) and is scored on all of it.
MNIST_EVAL = str(REPO_ROOT / "data" / "mnist" / "mnist-eval.tfrecord-*")


@dataclass
class ModelRun:
    train: subprocess.CompletedProcess | None = None
    reload: dict | None = None
    reload_error: str = ""
    out: Path | None = None


@dataclass
class StackRun:
    """One stack's run, what the tests assert on; ``error`` set when it could not be completed."""

    spec: StackSpec
    stack: Stack | None = None
    before: dict[str, str] = field(default_factory=dict)
    after: dict[str, str] = field(default_factory=dict)
    trainer_file: str | None = None
    install: subprocess.CompletedProcess | None = None
    train: subprocess.CompletedProcess | None = None
    reload: dict | None = None
    reload_error: str = ""
    out: Path | None = None
    # The other models' runs on the same layer, by model name: the trainer's process, the reload script's
    # result (or its error) and the output folder.
    more: dict[str, ModelRun] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    error: BaseException | None = None

    def summary(self) -> str:
        if self.stack is None:
            return f"{self.spec.name}: no stack: {str(self.error).splitlines()[0]}"
        dists = self.stack.dists
        versions = ", ".join(f"{n} {dists[n]}" for n in sorted(dists) if is_watched(n)
                             and not n.startswith(("tensorflow-io", "tensorboard-")))
        where = "built" if self.stack.built_now else f"cached, built {self.stack.manifest['built']}"
        timing = ", ".join(f"{k} {v:.1f} s" for k, v in self.seconds.items())
        note = f" [{self.stack.note}]" if self.stack.note else ""
        return (f"{self.spec.name}: python {self.stack.manifest['python']}{note}, {versions} "
                f"({self.spec.export_format} export; stack {where}) | {timing}")


def vertex_env(out: Path) -> dict[str, str]:
    """What Vertex AI sets for a tuning trial of a custom job (gs:// URIs there, with a trailing slash)."""
    return clean_env(AIP_MODEL_DIR=f"{out}/model/", AIP_CHECKPOINT_DIR=f"{out}/checkpoints/",
                     AIP_TENSORBOARD_LOG_DIR=f"{out}/logs/",
                     CLOUD_ML_HP_METRIC_FILE=f"{out}/hypertune/output.metrics", CLOUD_ML_TRIAL_ID="1")


def run_stack(spec: StackSpec, sdist: Path, data: dict[str, Path], work: Path) -> StackRun:
    """Build or reuse the stack, install the sdist in a layer on it, train from outside the repo, reload."""
    result = StackRun(spec)
    try:
        started = time.perf_counter()
        result.stack = ensure_stack(spec)
        result.seconds["stack"] = result.stack.seconds
        work.mkdir(parents=True, exist_ok=True)
        cwd = work / "cwd"  # outside the checkout: only the installed package can be imported
        cwd.mkdir()
        python = make_layer(result.stack, work / "venv")
        result.before = probe(python, cwd)["dists"]
        mark = time.perf_counter()
        result.install = install_sdist(python, sdist, cwd, f"{spec.name} (layer {work / 'venv'})")
        result.seconds["sdist install"] = time.perf_counter() - mark
        found = probe(python, cwd)
        result.after, result.trainer_file = found["dists"], found["trainer_file"]
        result.out = work / "vertex"
        mark = time.perf_counter()
        result.train = _run([python, "-m", "trainer.task", "--model", "wide_deep",
                             "--train-files", data["train"], "--eval-files", data["eval"],
                             "--num-epochs", "1", "--train-batch-size", "128",
                             "--export-format", spec.export_format],
                            cwd=cwd, env=vertex_env(result.out), timeout=600)
        result.seconds["train"] = time.perf_counter() - mark
        for model in spec.models:
            result.more[model] = _run_model(model, result, python, cwd, work)
        _reload(result, python, cwd, data["eval"])
        result.seconds["total"] = time.perf_counter() - started
    except Exception as exc:  # reported by the tests, which skip only on IndexUnreachable
        result.error = exc
    return result


# model -> (trainer flags after --model, the reload script and its arguments after the model dir). The image
# classifier trains briefly on the shipped MNIST evaluation shard and is scored on all 2,000 of its images.
MODEL_RUNS: dict[str, tuple[list[str], Path, list[str]]] = {
    "image_classifier": (["--train-files", MNIST_EVAL, "--eval-files", MNIST_EVAL, "--channels", "1",
                          "--num-epochs", "1", "--steps-per-epoch", "20", "--train-batch-size", "32"],
                         SCORE_IMAGES, [MNIST_EVAL]),
    "recommender": (["--train-files", RATINGS_HEAD, "--num-epochs", "1"], SCORE_RECOMMENDER, []),
}


def _run_model(model: str, result: StackRun, python: Path, cwd: Path, work: Path) -> ModelRun:
    """Train ``model`` from the installed sdist as Vertex AI would (its export is reloaded by _reload)."""
    flags, _, _ = MODEL_RUNS[model]
    if RATINGS_HEAD in flags:
        head = work / "ratings-head.csv"
        with open(RATINGS, encoding="utf-8") as ratings:
            lines = [ratings.readline() for _ in range(RATINGS_HEAD_ROWS + 1)]  # the header too
        head.write_text("".join(lines), encoding="utf-8")
        flags = [str(head) if flag == RATINGS_HEAD else flag for flag in flags]
    run = ModelRun(out=work / f"vertex-{model}")
    mark = time.perf_counter()
    run.train = _run([python, "-m", "trainer.task", "--model", model, *flags], cwd=cwd,
                     env=vertex_env(run.out), timeout=600)
    result.seconds[f"{model} train"] = time.perf_counter() - mark
    return run


def _reload(result: StackRun, python: Path, cwd: Path, census_eval: Path) -> None:
    """Reload every export the stack's runs wrote and score it (census, then the other models), in ONE fresh
    process in the layer (score_many.py): TensorFlow alone, imported once for all of them."""
    fmt = result.spec.export_format
    runs: list[tuple[ModelRun | None, list]] = []
    if result.train.returncode == 0:
        runs.append((None, [SCORE, census_eval, result.out / "model", fmt]))
    for model, run in result.more.items():
        if run.train.returncode == 0:
            _, score, score_args = MODEL_RUNS[model]
            runs.append((run, [score, run.out / "model", *score_args]))
    if not runs:
        return
    mark = time.perf_counter()
    proc = _run([python, SCORE_MANY, json.dumps([[str(a) for a in args] for _, args in runs])], cwd=cwd,
                timeout=600)
    result.seconds["reload"] = time.perf_counter() - mark
    scored = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else []
    for i, (run, _) in enumerate(runs):
        got = scored[i] if i < len(scored) else {"error": _tail(proc)}
        reload = got.get("result")
        if run is None:
            result.reload, result.reload_error = reload and reload[fmt], got.get("error", "")
        else:
            run.reload, run.reload_error = reload, got.get("error", "")
