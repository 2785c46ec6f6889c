"""Run a compiled Vertex AI job on this machine: ``scripts/run_job.py JOB_FILE --local [--resume]``.

The same request body that would be submitted (a CustomJob or a HyperparameterTuningJob, camelCase REST) runs
here with the same trainer, arguments and per-replica runtime contract (see ``environment.py``); ``gs://``
maps to ``<local_root>/gs/`` and the shipped ``data/`` tree is staged into the data bucket's folder there.
Tuning studies run on Optuna with Vertex StudySpec semantics (see ``tuning.py``).

    from jobs.local import run_local
    status = run_local("HyperparameterTuningJob", body, outputs, repo_root=Path("."))
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from pathlib import Path
from typing import IO

from jobs.body import CUSTOM_JOB, KINDS, spec_field
from jobs.local.spec import LocalRunError
from trainer.contract import JOB_ID

__all__ = ["LocalRunError", "run_local"]

_IMPORT_STDOUT = sys.stdout


def run_local(
    kind: str,
    body: dict,
    outputs: dict[str, str],
    *,
    repo_root: Path,
    local_root: Path | None = None,
    resume: bool = False,
    strict_accelerators: bool = False,
    stream: IO[str] = sys.stdout,
) -> int:
    """Run the job; returns the exit status (0 success, 1 job/study failed, 2 bad input, 130 interrupted)."""
    if stream is _IMPORT_STDOUT:  # follow a sys.stdout replaced after import (pytest, redirect_stdout)
        stream = sys.stdout
    repo_root = Path(repo_root).resolve()
    local_root = Path(local_root).resolve() if local_root else repo_root / ".local"
    try:
        return _run(kind, body, outputs, repo_root, local_root, resume, strict_accelerators, stream)
    except LocalRunError as exc:
        print(f"error: local run: {exc}", file=sys.stderr)
        return 2


def _run(kind, body, outputs, repo_root, local_root, resume, strict, stream) -> int:
    from jobs.local import environment, spec

    if kind not in KINDS:
        raise LocalRunError("kind", f"{kind!r}; use {' or '.join(KINDS)}")
    if not isinstance(body, dict):
        raise LocalRunError("body", "expected the compiled request body (a mapping)")
    image = outputs.get("trainer_image", "")
    if kind == CUSTOM_JOB:
        job = spec.parse_job_spec(body.get(spec_field(kind)), spec_field(kind), image)
        study = None
    else:
        study = spec.parse_tuning_job(body, image)
        job = study.trial_job
    for pool in job.pools:
        environment.check_module_root(pool.python_argv, repo_root, pool.path)
    missing = environment.missing_accelerators(job)
    if missing and strict:
        raise LocalRunError("machineSpec", f"this machine lacks {'; '.join(missing)} (--strict-accelerators)")
    name = str(body.get("displayName") or "local-job")
    base = _base_dir(job.base_output_uri, local_root, name, study and study.raw_study_spec, resume)
    if missing:
        print(f"warning: this machine lacks {'; '.join(missing)}: running on CPU", file=sys.stderr)
    staged = environment.stage_data(repo_root, local_root, outputs.get("data_bucket", ""))
    if staged:
        where = environment.local_bucket(outputs["data_bucket"], local_root)
        print(f"staged {staged} data file(s) into {where}", file=stream)
    # Like a Vertex machine without accelerators, a job that asks for none does not see this machine's GPUs.
    cpu_only = bool(missing) or not any(p.accelerator_type for p in job.pools)
    if study is None:
        return _run_custom_job(job, name, base, local_root, repo_root, cpu_only, stream)
    from jobs.local import tuning

    return tuning.run_study(
        study,
        display_name=name,
        base_local=base,
        local_root=local_root,
        repo_root=repo_root,
        resume=resume,
        cpu_only=cpu_only,
        stream=stream,
        request=body,
        trainer_image=image,
        registry=_registry(local_root, study.raw_study_spec),
    )


def local_job_id(name: str) -> str:
    """The job id (CLOUD_ML_JOB_ID) of a local run (Vertex AI sets the job's numeric id)."""
    from jobs.local.tuning import slug

    return f"local-{slug(name)}"


def _registry(local_root: Path, study_spec: dict) -> Path:
    """Where the last local run of a studySpec is recorded, so that --resume finds it again."""
    digest = hashlib.sha256(json.dumps(study_spec, sort_keys=True).encode()).hexdigest()[:16]
    return local_root / "studies" / f"{digest}.json"


def _base_dir(uri: str, local_root: Path, name: str, study_spec: dict | None, resume: bool) -> Path:
    """Where outputs go: baseOutputDirectory mapped to local_root, else a folder named after the job.

    A resumed study continues in the folder of the last local run of the same studySpec: definitions put the
    job id in displayName and baseOutputDirectory, so the resumed submission's own folder is new and empty.
    """
    from jobs.local import environment, tuning

    if uri:
        base = Path(environment.to_local(uri, local_root).rstrip("/"))
    else:
        base = local_root / "runs" / f"{tuning.slug(name)}-{time.strftime('%Y%m%d-%H%M%S')}"
    if not resume and study_spec is not None and (base / "study.db").exists():
        raise LocalRunError(
            "baseOutputDirectory", f"a study already exists at {base}; pass --resume to continue it"
        )
    if resume and study_spec is not None and not (base / "study.db").exists():
        registry = _registry(local_root, study_spec)
        if not registry.exists():
            raise LocalRunError("--resume", f"no earlier local run of this studySpec under {local_root}")
        base = Path(json.loads(registry.read_text())["base"])
    return base


def _run_custom_job(
    job, name: str, base: Path, local_root: Path, repo_root: Path, cpu_only: bool, stream
) -> int:
    import os

    from jobs.local import launcher

    has_base = bool(job.base_output_uri)
    run_dir = base / "replica-logs"
    threads = max(1, (os.cpu_count() or 1) // job.replica_total)
    t0 = time.monotonic()
    run = launcher.start_job(
        job,
        run_dir=run_dir,
        base_local=base if has_base else None,
        local_root=local_root,
        repo_root=repo_root,
        extra_env={JOB_ID: local_job_id(name)},
        threads=threads,
        cpu_only=cpu_only,
    )
    names = ", ".join(r.name for r in run.replicas)
    print(
        f"job '{name}': running {len(run.replicas)} replica(s) ({names}); logs in {run_dir}",
        file=stream,
        flush=True,
    )
    try:
        rc = run.wait()
    except KeyboardInterrupt:
        run.terminate()
        print(f"job '{name}': interrupted; replicas stopped. Logs: {run_dir}", file=stream)
        return 130
    took = time.monotonic() - t0
    if rc == 0:
        print(f"job '{name}' succeeded in {took:.1f}s", file=stream)
        if has_base:
            print(
                f"  SavedModel: {base / 'model'}\n  TensorBoard: tensorboard --logdir {base / 'logs'}",
                file=stream,
            )
        return 0
    print(f"job '{name}' failed after {took:.1f}s: {run.failure}", file=stream)
    for line in launcher.tail(run.failed_log or run.chief_log, 5):
        print(f"  | {line}", file=stream)
    return 1
