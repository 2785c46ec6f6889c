"""The infra tests' own environments, synthesized once into a temporary directory (never cdktf.out).

Every infra test reads the scenarios in tests/infra/scenarios/, through the loader's own override
(`INFRA_ENVIRONMENTS_DIR`), never infra/environments/: users put their own project there first thing
(infra/README.md), and the tests must pass whatever valid values it holds. Only tests/scripts/test_synth.py
looks at the shipped files (through the real app), and asserts nothing about their values.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from infra.config import ENVIRONMENTS_DIR, ENVIRONMENTS_DIR_VAR, list_environments, load_environment
from tests.infra.helpers import SCENARIOS_DIR, scenario_runs

# What an infra test did that could let infra/environments/*.yaml reach it, recorded by the audit hook below
# and failed by the autouse fixture `reads_no_shipped_environment`. That no infra test can see those files is
# why tests/user_copy.py leaves tests/infra out of the suites it reruns on a user's values.
SHIPPED_READS: list[str] = []
_SHIPPED = str(ENVIRONMENTS_DIR)
_watching = False


def _shipped(path) -> bool:
    if not isinstance(path, (str, bytes, os.PathLike)):
        return False  # a file descriptor
    path = os.path.abspath(os.fsdecode(path))
    return path == _SHIPPED or path.startswith(_SHIPPED + os.sep)


def _audit(event: str, args: tuple) -> None:
    if not _watching:
        return
    if event in ("open", "os.scandir", "os.listdir") and _shipped(args[0]):
        SHIPPED_READS.append(f"{event} {os.fsdecode(args[0])}")
    elif event == "subprocess.Popen":  # a child that reads configs where its environment or arguments say
        _, argv, _, env = args
        override = (os.environ if env is None else env).get(ENVIRONMENTS_DIR_VAR)
        named = [a for a in ([argv] if isinstance(argv, (str, bytes)) else argv or [])
                 if "infra/environments" in os.fsdecode(a)]
        if override in (None, "", _SHIPPED) or named:
            SHIPPED_READS.append(f"a child process ({ENVIRONMENTS_DIR_VAR}={override!r}, {named}): {argv}")


sys.addaudithook(_audit)  # for good (audit hooks cannot be removed): idle outside an infra test


@pytest.fixture(autouse=True)
def reads_no_shipped_environment():
    global _watching
    SHIPPED_READS.clear()
    _watching = True
    try:
        yield
    finally:
        _watching = False
    assert not SHIPPED_READS, f"infra tests read tests/infra/scenarios, never {_SHIPPED}: {SHIPPED_READS}"


@pytest.fixture(scope="package", autouse=True)
def scenarios_dir():
    """Point the loader at the scenarios for the tests of this package only.

    Package scope, not session: in a run that also collects tests/jobs or tests/scripts, those still read the
    real environments once the infra tests are done. Tests that need another directory monkeypatch the
    variable again; pytest restores this value after each of them.
    """
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(ENVIRONMENTS_DIR_VAR, str(SCENARIOS_DIR))
        yield SCENARIOS_DIR


@pytest.fixture(scope="package")
def configs(scenarios_dir):
    return {env: load_environment(env) for env in list_environments()}


@pytest.fixture(scope="package")
def synth_result(tmp_path_factory, configs):
    from infra.main import build_app
    from infra.policy import write_checkov_config

    outdir = tmp_path_factory.mktemp("cdktf.out")
    app, stacks = build_app(list(configs.values()), outdir,
                            schedules={env: scenario_runs(cfg) for env, cfg in configs.items()})
    app.synth()
    write_checkov_config(outdir)
    return outdir, stacks


@pytest.fixture(scope="package")
def synth_dir(synth_result) -> Path:
    return synth_result[0]


@pytest.fixture(scope="package")
def stack_texts(synth_dir, configs) -> dict[str, str]:
    """The platform stacks (`<env>`, what CI applies) by environment."""
    return {env: (synth_dir / "stacks" / env / "cdk.tf.json").read_text() for env in configs}


@pytest.fixture(scope="package")
def stacks(stack_texts) -> dict[str, dict]:
    return {env: json.loads(text) for env, text in stack_texts.items()}


@pytest.fixture(scope="package")
def bootstrap_texts(synth_dir, configs) -> dict[str, str]:
    """The bootstrap stacks (`<env>-bootstrap`, what an administrator applies) by environment."""
    return {env: (synth_dir / "stacks" / f"{env}-bootstrap" / "cdk.tf.json").read_text() for env in configs}


@pytest.fixture(scope="package")
def bootstraps(bootstrap_texts) -> dict[str, dict]:
    return {env: json.loads(text) for env, text in bootstrap_texts.items()}


@pytest.fixture(scope="package")
def all_stacks(stacks, bootstraps) -> dict[str, dict]:
    """Every synthesized stack by stack name."""
    return {**stacks, **{f"{env}-bootstrap": stack for env, stack in bootstraps.items()}}
