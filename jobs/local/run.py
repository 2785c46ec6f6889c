"""Run a compiled Vertex AI job on this machine: ``scripts/run_job.py JOB_FILE --local [--resume]``.

The same request body that would be submitted (a CustomJob or a HyperparameterTuningJob, camelCase REST) runs
here with the same trainer, arguments and per-replica runtime contract (see ``environment.py``); ``gs://``
maps to ``<local_root>/gs/`` and the shipped ``data/`` tree is staged into the data bucket's folder there.
Tuning studies run on Optuna with Vertex StudySpec semantics (see ``tuning.py``).

Bad input is found before anything is written: an unusable ``--local-root``, more processes at once than this
machine runs (``capacity.py``), and any gs:// URI or derived path that would land outside the local root
(``environment.to_local``/``environment.inside``) are one line naming the field, exit status 2.

    from jobs.local.run import run_local
    status = run_local("HyperparameterTuningJob", body, outputs, repo_root=Path("."))
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, TYPE_CHECKING

from common.reader import file_kind
from jobs.definition.body import is_gs, join
from jobs.definition.errors import short
from jobs.definition.kinds import CUSTOM_JOB, KINDS, runs_study, spec_field
from jobs.local.spec import LocalRunError
from trainer.contract import HP_METRIC_FILE, JOB_ID

if TYPE_CHECKING:
    from jobs.local.preemption import Preemption

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
    preemption: Preemption | None = None,
    start_job: Callable | None = None,
) -> int:
    """Run the job; returns the exit status (0 success, 1 job/study failed, 2 bad input, 130 interrupted).

    ``preemption``: preempt a Spot CustomJob's replicas once and restart them (``preemption.py``).
    ``start_job``: what starts a job's (or trial's) replicas, ``launcher.start_job`` by default
    (``container.Starter``: in containers)."""
    if stream is _IMPORT_STDOUT:  # follow a sys.stdout replaced after import (pytest, redirect_stdout)
        stream = sys.stdout
    repo_root = Path(repo_root).resolve()
    given = Path(local_root) if local_root else repo_root / ".local"
    try:
        check_local_root(given)
        return _run(kind, body, outputs, repo_root, given.resolve(), resume, strict_accelerators, stream,
                    preemption, start_job)
    except LocalRunError as exc:
        print(f"error: local run: {exc}", file=sys.stderr)
        return 2


def check_local_root(path: Path) -> None:
    """LocalRunError unless ``path`` is a writable directory, or a missing one whose parent is writable.

    Writes nothing: the folder is created by the first write of the run.
    """
    field = "--local-root"
    if path.is_symlink() and not path.exists():
        raise LocalRunError(field, f"{path} is a dangling symlink (to {os.readlink(path)}); use a directory")
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        mode = None
    except OSError as exc:  # e.g. a parent that is a file (ENOTDIR), a loop of symlinks
        raise LocalRunError(field, f"{path}: {exc.strerror}; use a directory") from None
    if mode is not None:
        if not stat.S_ISDIR(mode):
            raise LocalRunError(
                field, f"{path} is {file_kind(mode)}; use a directory (or a new path in an existing one)"
            )
        if not os.access(path, os.W_OK | os.X_OK):
            raise LocalRunError(field, f"{path} is not writable; use a directory you can write to")
        return
    parent = path.parent
    if not parent.is_dir():
        raise LocalRunError(
            field, f"{path} does not exist and neither does its parent {parent}; create it or use another"
        )
    if not os.access(parent, os.W_OK | os.X_OK):
        raise LocalRunError(field, f"{path} does not exist and its parent {parent} is not writable")


def _run(kind, body, outputs, repo_root, local_root, resume, strict, stream, preemption, start_job) -> int:
    from jobs.local import capacity, environment, spec

    if kind not in KINDS:
        raise LocalRunError("kind", f"{short(kind)}; use {' or '.join(KINDS)}")
    if not isinstance(body, dict):
        raise LocalRunError("body", "expected the compiled request body (a mapping)")
    image = outputs.get("trainer_image", "")
    if not runs_study(kind):
        job = spec.parse_job_spec(body.get(spec_field(kind)), spec_field(kind), image)
        study = None
    else:
        tuning_job = spec.parse_tuning_job(body, image)
        study, job = tuning_job.study, tuning_job.trial_job
    for pool in job.pools:
        environment.check_module_root(pool.python_argv, repo_root, pool.path)
    missing = environment.missing_accelerators(job)
    if missing and strict:
        raise LocalRunError("machineSpec", f"this machine lacks {'; '.join(missing)} (--strict-accelerators)")
    name = str(body.get("displayName") or "local-job")
    # Everything that could refuse the job comes before the first write (staging, folders, the study).
    capacity.check(job, study.parallel_trials if study else 1)
    _check_uris(job, study, outputs, local_root)
    base_field = join(spec_field(kind), "baseOutputDirectory", "outputUriPrefix")
    base = _base_dir(
        job.base_output_uri, local_root, name, study and study.raw, resume, base_field
    )
    _check_outputs(base, local_root, job, study, base_field if job.base_output_uri else "--local-root")
    if missing:
        print(f"warning: this machine lacks {'; '.join(missing)}: running on CPU", file=sys.stderr)
    staged = environment.stage_data(repo_root, local_root, outputs.get("data_bucket", ""))
    if staged:
        where = environment.local_bucket(outputs["data_bucket"], local_root)
        print(f"staged {staged} data file(s) into {where}", file=stream)
    # Like a Vertex machine without accelerators, a job that asks for none does not see this machine's GPUs.
    cpu_only = bool(missing) or not any(p.accelerator_type for p in job.pools)
    if study is None:
        return _run_custom_job(
            job, name, base, local_root, repo_root, cpu_only, stream, preemption, start_job
        )
    from jobs.local import tuning

    return tuning.run_study(
        tuning_job,
        display_name=name,
        base_local=base,
        local_root=local_root,
        repo_root=repo_root,
        resume=resume,
        cpu_only=cpu_only,
        stream=stream,
        request=body,
        trainer_image=image,
        registry=_registry(local_root, study.raw),
        start_job=start_job,
    )


def _check_uris(job, study, outputs: dict[str, str], local_root: Path) -> None:
    """Every gs:// URI the run maps (args, env, tuned values, the data bucket) through the gate, up front."""
    from jobs.local import environment

    for pool in job.pools:
        for arg in pool.python_argv:
            environment.to_local(arg, local_root, pool.args_path)
        for _, value in pool.env:
            environment.to_local(value, local_root, pool.env_path)
    for i, param in enumerate(study.parameters if study else ()):
        for value in param.values:
            field = join("studySpec", "parameters", i, "categoricalValueSpec", "values")
            environment.to_local(f"--{param.parameter_id}={value}", local_root, field)
    if outputs.get("data_bucket"):
        environment.local_bucket(outputs["data_bucket"], local_root)


def _check_outputs(base: Path, local_root: Path, job, study, field: str) -> None:
    """Every folder and file the run will write under base stays under the local root (symlinks followed)."""
    from jobs.local import environment

    has_base = bool(job.base_output_uri)
    if study is None:
        paths = environment.run_paths(base, None, has_base)
    else:
        paths = [base, *(base / name for name in STUDY_FILES)]
        for trial in range(1, study.max_trials + 1):
            # A trial folder not there yet holds no symlink: its paths resolve under base, checked above.
            if os.path.lexists(base / str(trial)):
                paths += environment.run_paths(base, str(trial), True)
        registry = _registry(local_root, study.raw)
        environment.inside(registry, local_root, "--local-root")
    for path in paths:
        environment.inside(path, local_root, field)


# What a study writes in its base folder: Optuna's SQLite storage (and its journal), the report and the plot.
STUDY_FILES = ("study.db", "study.db-journal", "study.json", "study.json.tmp", "study.png")


def _registry(local_root: Path, study_spec: dict) -> Path:
    """Where the last local run of a studySpec is recorded, so that --resume finds it again."""
    digest = hashlib.sha256(json.dumps(study_spec, sort_keys=True).encode()).hexdigest()[:16]
    return local_root / "studies" / f"{digest}.json"


def study_base(base: Path, local_root: Path, study_spec: dict) -> Path:
    """Where a study mapped to ``base`` ran: there, or (a resumed study, whose own folder is new) the folder
    of the last local run of the same studySpec; ``base`` when neither holds one."""
    if (base / "study.db").exists():
        return base
    try:
        return Path(json.loads(_registry(local_root, study_spec).read_text())["base"])
    except (OSError, ValueError, KeyError, TypeError):
        return base


def _base_dir(
    uri: str, local_root: Path, name: str, study_spec: dict | None, resume: bool, field: str
) -> Path:
    """Where outputs go: baseOutputDirectory mapped to local_root, else a folder named after the job.

    A resumed study continues in the folder of the last local run of the same studySpec: definitions put the
    job id in displayName and baseOutputDirectory, so the resumed submission's own folder is new and empty.
    """
    from jobs.local import environment

    if uri:
        if not is_gs(uri):  # a local or relative path would sidestep the gs:// mapping and its checks
            raise LocalRunError(field, f"{short(uri)} is not a gs:// URI; use gs://BUCKET/PATH")
        base = Path(environment.to_local(uri, local_root, field).rstrip("/"))
    else:
        base = local_root / "runs" / f"{environment.slug(name)}-{time.strftime('%Y%m%d-%H%M%S')}"
        environment.inside(base, local_root, "--local-root")
    if not resume and study_spec is not None and (base / "study.db").exists():
        raise LocalRunError(
            "baseOutputDirectory", f"a study already exists at {base}; pass --resume to continue it"
        )
    if resume and study_spec is not None and not (base / "study.db").exists():
        registry = _registry(local_root, study_spec)
        if not registry.exists():
            raise LocalRunError("--resume", f"no earlier local run of this studySpec under {local_root}")
        try:
            base = Path(json.loads(registry.read_text())["base"])
        except (OSError, ValueError, KeyError, TypeError):
            raise LocalRunError(
                "--resume", f"the record of the earlier run, {registry}, is unreadable"
            ) from None
        environment.inside(base, local_root, "--resume")
    return base


def _run_custom_job(
    job, name: str, base: Path, local_root: Path, repo_root: Path, cpu_only: bool, stream, preemption,
    start_job=None,
) -> int:
    from jobs.local import capacity, console, environment, launcher

    has_base = bool(job.base_output_uri)
    run_dir = base / environment.REPLICA_LOGS
    t0 = time.monotonic()
    run = (start_job or launcher.start_job)(
        job,
        run_dir=run_dir,
        base_local=base if has_base else None,
        local_root=local_root,
        repo_root=repo_root,
        # Vertex AI gives only trials a metric file; a CustomJob whose trainer reports anyway (trainer.task
        # always does) writes to its own folder, never cloudml-hypertune's shared /tmp default.
        extra_env={
            JOB_ID: environment.local_job_id(name),
            HP_METRIC_FILE: str(environment.metric_file(base)),
        },
        threads=capacity.threads_per_replica(job.replica_total),
        cpu_only=cpu_only,
        field=join(spec_field(CUSTOM_JOB), "baseOutputDirectory", "outputUriPrefix")
        if has_base
        else "--local-root",
    )
    names = ", ".join(r.name for r in run.replicas)
    print(
        f"job '{name}': running {len(run.replicas)} replica(s) ({names}); logs in {run_dir}",
        file=stream,
        flush=True,
    )
    log = console.ChiefLog(run.chief_log, stream)  # its progress lines on the console as the run goes
    try:
        if preemption is not None:
            from jobs.local import preemption as preempting

            console.wait(run, log, until=lambda: preemption.due(run), interval=0.05)
            if run.poll() is None:
                try:
                    preempting.preempt(run, preemption, name, stream)
                except RuntimeError as exc:  # a replica that cannot start again (launcher._spawn)
                    run.terminate()
                    print(f"job '{name}' failed: {exc}", file=stream)
                    return 1
        rc = console.wait(run, log)
    except KeyboardInterrupt:
        run.terminate()
        print(f"job '{name}': interrupted; replicas stopped. Logs: {run_dir}", file=stream)
        return 130
    took = time.monotonic() - t0
    if rc == 0:
        print(f"job '{name}' succeeded in {took:.1f}s", file=stream)
        if has_base:
            print("\n".join(console.closing(base / "model")), file=stream)
            print(f"  TensorBoard: tensorboard --logdir {base / 'logs'}", file=stream)
        return 0
    print(f"job '{name}' failed after {took:.1f}s: {run.failure}", file=stream)
    for line in launcher.tail(run.failed_log or run.chief_log, 5):
        print(f"  | {line}", file=stream)
    return 1
