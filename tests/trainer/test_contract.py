"""trainer.contract: the runtime contract written once, read by the trainer and the local executor alike."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.trainer.helpers import REPO_ROOT
from trainer import config, contract
from trainer.env import Cluster, choose_distribution, cluster_from_env, cpu_replicas, output_dirs, trial_id

# The literal names of the contract: spelled in trainer/contract.py, read everywhere else.
LITERALS = {
    contract.TRAINER_MODULE,
    contract.METRIC_FLAG,
    *contract.OUTPUT_DIRS.values(),
    contract.CLUSTER_SPEC,
    contract.TF_CONFIG,
    contract.TRIAL_ID,
    contract.HP_METRIC_FILE,
    contract.JOB_ID,
    contract.CPU_FALLBACK_ENV,
    contract.CPU_REPLICAS_ENV,
    *contract.WORKER_POOLS,
    contract.PROGRESS_TAG,
}


def test_vertex_names_and_the_pool_roles():
    # Pinned to Vertex AI's documentation: a typo here would be a trainer that never finds its output dirs.
    assert contract.OUTPUT_DIRS == {"model": "AIP_MODEL_DIR", "checkpoints": "AIP_CHECKPOINT_DIR",
                                    "logs": "AIP_TENSORBOARD_LOG_DIR"}
    assert contract.WORKER_POOL_ROLES == {"workerpool0": "chief", "workerpool1": "worker",
                                          "workerpool2": "ps", "workerpool3": "evaluator"}
    assert (contract.TRIAL_ID, contract.HP_METRIC_FILE) == ("CLOUD_ML_TRIAL_ID", "CLOUD_ML_HP_METRIC_FILE")


def test_contract_imports_nothing():
    code = ("import sys, trainer.contract; "
            "print(sorted(m for m in sys.modules if m.startswith(('trainer', 'jobs', 'tensorflow'))))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True,
                         check=True)
    assert json.loads(out.stdout.replace("'", '"')) == ["trainer", "trainer.contract"]
    tree = ast.parse((REPO_ROOT / "trainer/contract.py").read_text())
    imports = [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)]
    assert [getattr(n, "module", None) for n in imports] == ["__future__"]


def test_the_trainer_module_and_its_metric_flag_are_the_parsers():
    parser = config.build_parser()
    assert parser.prog == contract.TRAINER_MODULE
    assert (REPO_ROOT / (contract.TRAINER_MODULE.replace(".", "/") + ".py")).is_file()
    assert any(contract.METRIC_FLAG in a.option_strings for a in parser._actions)


def _local_replica_env(tmp_path: Path, pool_index: int, trial: str | None = None, fallback: bool = False,
                       gpus: int = 1):
    """What the local executor sets for one replica of a 2-pool (chief + 2 workers) job with ``gpus`` GPUs
    per machine (``fallback``: this machine lacks them)."""
    from jobs.local import environment, spec
    from tests.jobs.local.helpers import custom_job, pool

    gpu = {"machineType": "n1-standard-4", "acceleratorType": "NVIDIA_TESLA_T4", "acceleratorCount": gpus}
    body = custom_job(pool(machine=gpu), pool(machine=gpu, replicas=2))
    job = spec.parse_job_spec(body["jobSpec"], "jobSpec")
    # A shell with stale contract variables: none may leak into the replica.
    stale = {name: "stale" for name in contract.REPLICA_VARIABLES} | {"HOME": "/h"}
    return environment.replica_env(
        job.pools[pool_index], base_env=stale, local_root=tmp_path, repo_root=REPO_ROOT,
        dirs=environment.output_dirs(tmp_path / "base", trial),
        cluster=environment.cluster_envs(job, trial)[(pool_index, 0)], extra={}, threads=1, cpu_only=fallback)


@pytest.mark.parametrize("fallback, gpus", [(False, 1), (True, 1), (False, 2), (True, 2)])
def test_the_local_executor_sets_exactly_the_contracts_names(tmp_path, fallback, gpus):
    env = _local_replica_env(tmp_path, 0, fallback=fallback, gpus=gpus)
    runtime = {k for k in env
               if k.startswith(("AIP_", "CLOUD_ML_", "TRAINER_")) or k in ("CLUSTER_SPEC", "TF_CONFIG")}
    assert runtime == {*contract.OUTPUT_DIRS.values(), contract.CLUSTER_SPEC, contract.TF_CONFIG,
                       *([contract.CPU_FALLBACK_ENV] if fallback else []),
                       *([contract.CPU_REPLICAS_ENV] if fallback and gpus > 1 else [])}
    assert "stale" not in env.values()
    assert set(json.loads(env[contract.CLUSTER_SPEC])["cluster"]) == set(contract.WORKER_POOLS[:2])
    assert set(json.loads(env[contract.TF_CONFIG])["cluster"]) == set(contract.TF_TASK_TYPES[:2])


def test_the_trainer_reads_what_the_local_executor_sets(tmp_path):
    env = _local_replica_env(tmp_path, 1, trial="7", fallback=True)
    dirs = output_dirs(None, env)
    wanted = tuple(str(tmp_path / "base/7" / folder) for folder in contract.OUTPUT_DIRS)
    assert (dirs.model, dirs.checkpoints, dirs.logs) == wanted
    cluster = cluster_from_env(env)
    assert (cluster.source, cluster.task_type, cluster.task_index, cluster.num_workers) == (
        contract.TF_CONFIG, "worker", 0, 3)
    del env[contract.TF_CONFIG]  # as on Vertex AI for a custom container: CLUSTER_SPEC alone
    cluster = cluster_from_env(env)
    assert (cluster.source, cluster.task_type, cluster.num_workers) == (contract.CLUSTER_SPEC, "worker", 3)
    assert choose_distribution("tpu", cluster, 0, env) == "default"  # the CPU fallback is read by its name
    # Two GPUs a machine, none here: the trainer mirrors over the two logical CPUs the executor asks for.
    env = _local_replica_env(tmp_path, 0, fallback=True, gpus=2)
    assert cpu_replicas(env) == 2 and choose_distribution("mirrored", Cluster(), 0, env) == "mirrored"
    assert trial_id({contract.TRIAL_ID: "7"}) == "7"


def _code_strings(path: Path):
    """(line, value) of each string literal in code: docstrings left out, f-string pieces included."""
    tree = ast.parse(path.read_text())
    scopes = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    docstrings = {id(n.body[0].value) for n in ast.walk(tree) if isinstance(n, scopes) and n.body
                  and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            yield node.lineno, node.value


def test_each_name_is_spelled_once_in_the_trainer_and_the_jobs_layer():
    found = []
    for folder in ("trainer", "jobs"):
        for path in sorted((REPO_ROOT / folder).rglob("*.py")):
            if path == REPO_ROOT / "trainer/contract.py":
                continue
            for line, value in _code_strings(path):
                named = value in LITERALS or re.fullmatch(r"workerpool\d*", value)
                if named or f"{contract.TRAINER_MODULE}:" in value:
                    found.append(f"{path.relative_to(REPO_ROOT)}:{line}: {value!r}")
    assert not found, "read these from trainer.contract:\n" + "\n".join(found)
