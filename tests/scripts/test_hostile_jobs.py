"""Hostile or broken job files through the real `scripts/run_job.py`: each fails fast with one line naming
the file and field, exit status 2, no traceback, and nothing written (not even a --local run's root)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.jobs.helpers import CUSTOM, JOBS_DIR, REPO_ROOT, refusal, run_script
from tests.jobs.test_loader import ALIAS_BOMB, nested

CPU_JOB = JOBS_DIR / "census_cpu.yaml"


def _text(text: str):
    def make(tmp: Path) -> Path:
        path = tmp / "job.yaml"
        path.write_text(text, encoding="utf-8")
        return path

    return make


def _custom(old: str, new: str):
    assert old in CUSTOM
    return _text(CUSTOM.replace(old, new))


def _fifo(tmp: Path) -> Path:
    os.mkfifo(tmp / "job.yaml")
    return tmp / "job.yaml"


def _big(tmp: Path) -> Path:
    path = tmp / "job.yaml"
    path.write_text(CUSTOM + "# padding\n" * 120_000, encoding="utf-8")
    return path


def _shipped(_tmp: Path) -> Path:
    return CPU_JOB


# id, file maker, extra args, field the error names, words in it
HOSTILE = [
    ("alias-bomb", _text(ALIAS_BOMB), [], "", "expands to more than 50000 values"),
    ("deep-nesting", _text(nested(200)), [], "line 34", "nested more than 32 levels deep"),
    ("parser-recursion", _text("a: " + "[" * 5000 + "]" * 5000), [], "(parse)", "nested too deep to parse"),
    ("fifo", _fifo, [], "(file)", "not a regular file (a FIFO)"),
    ("directory", lambda tmp: tmp, [], "(file)", "not a regular file (a directory)"),
    ("oversized", _big, [], "(file)", "allowed: at most 1048576 bytes"),
    (
        "bidi-name",
        _custom("labels: {app: census}", 'displayName: "job\\u202e"\nlabels: {app: census}'),
        [],
        "displayName",
        "U+202E",
    ),
    ("label-escape", _custom("{app: census}", '{app: "census\\e[31m"}'), [], "labels.app", "U+001B"),
    (
        "env-name",
        _custom(
            "        pythonModule: trainer.task",
            "        pythonModule: trainer.task\n        env: [{name: 'A B', value: x}]",
        ),
        [],
        "jobSpec.workerPoolSpecs.0.pythonPackageSpec.env.0.name",
        "not an environment variable name",
    ),
    (
        "env-value-nul",
        _custom(
            "        pythonModule: trainer.task",
            '        pythonModule: trainer.task\n        env: [{name: A, value: "a\\0"}]',
        ),
        [],
        "jobSpec.workerPoolSpecs.0.pythonPackageSpec.env.0.value",
        "U+0000",
    ),
    (
        "no-service-account",
        _custom(
            "  serviceAccount: ${infra.runtime_service_account}\n  tensorboard: ${infra.tensorboard}\n", ""
        ),
        [],
        "jobSpec.serviceAccount",
        "Custom Code Service Agent",
    ),
    (
        "dotdot-output",
        _shipped,
        ["--set", "jobSpec.baseOutputDirectory.outputUriPrefix=gs://b-models/../../x"],
        "jobSpec.baseOutputDirectory.outputUriPrefix",
        "'..' path segment",
    ),
    (
        "dotdot-data",
        _shipped,
        [
            "--set",
            "jobSpec.workerPoolSpecs.0.containerSpec.args.1="
            "--train-files=${infra.data_bucket}/../../../etc/passwd",
        ],
        "jobSpec.workerPoolSpecs.0.containerSpec.args.1",
        "'..' path segment",
    ),
    (
        "set-alias-bomb",
        _shipped,
        [
            "--set",
            "displayName=[&a [x,x,x,x,x,x,x,x,x], "
            + ", ".join(f"&{chr(98 + i)} [{','.join([f'*{chr(97 + i)}'] * 9)}]" for i in range(8))
            + "]",
        ],
        "--set displayName",
        "expands to more than",
    ),
]


# A --local run of these must not create its root either: the escapes aim at exactly that run's files.
LOCAL_TOO = {"alias-bomb", "no-service-account", "dotdot-output", "dotdot-data"}
CASES = [
    pytest.param(*h[1:], mode, id=f"{h[0]}{mode}")
    for h in HOSTILE
    for mode in ("--dry-run", "--local")
    if mode == "--dry-run" or h[0] in LOCAL_TOO
]


@pytest.mark.parametrize("make, args, field, words, mode", CASES)
def test_hostile_input_is_one_line_exit_2_and_writes_nothing(
    make, args, field, words, mode, tmp_path, script_env
):
    inputs = tmp_path / "in"
    inputs.mkdir()
    file = make(inputs)
    local_root = tmp_path / "local-root"
    before = sorted(p.name for p in REPO_ROOT.iterdir())
    result = run_script(
        [file, mode, *args, "--local-root", local_root] if mode == "--local" else [file, mode, *args],
        script_env,
        timeout=60,
    )
    line = refusal(result, file, field)
    assert words in line, line
    assert line.isprintable()
    assert not local_root.exists()
    assert sorted(p.name for p in REPO_ROOT.iterdir()) == before
