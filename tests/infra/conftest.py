"""Synthesizes every environment once per session, into a temporary directory (never the repo's cdktf.out)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from infra.config import list_environments, load_environment

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def configs():
    return {env: load_environment(env) for env in list_environments()}


@pytest.fixture(scope="session")
def synth_result(tmp_path_factory, configs):
    from infra.main import build_app
    from infra.policy import write_checkov_config

    outdir = tmp_path_factory.mktemp("cdktf.out")
    app, stacks = build_app(list(configs.values()), outdir)
    app.synth()
    write_checkov_config(outdir)
    return outdir, stacks


@pytest.fixture(scope="session")
def synth_dir(synth_result) -> Path:
    return synth_result[0]


@pytest.fixture(scope="session")
def stack_texts(synth_dir, configs) -> dict[str, str]:
    return {env: (synth_dir / "stacks" / env / "cdk.tf.json").read_text() for env in configs}


@pytest.fixture(scope="session")
def stacks(stack_texts) -> dict[str, dict]:
    return {env: json.loads(text) for env, text in stack_texts.items()}
