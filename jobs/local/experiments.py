"""The local Experiments store: each ``--local`` run of a definition as a run of its experiment, one JSON
file per run, ``<local root>/experiments/<experiment>/<run id>.json``, holding the same MetadataService bodies
a cloud run sends to Vertex AI (``jobs.definition.experiments``).

Written once the run has ended, from its folder: the trainer's resolved flags (``trainer_config.json``) and
metrics.json's eval figures beside the SavedModel (a study's best trial's), the data files the flags name with
their size and CRC32C (Cloud Storage's checksum, so a local run and a cloud run of the same bytes show the
same identity). Each file is written to a temporary name and renamed: a reader never sees half a run.

Reading is bounded: at most ``MAX_RUNS`` files, each a regular file of at most 1 MiB of JSON
(common.reader), ``MAX_STORE_BYTES`` in all; anything else in the folder is one line, exit status 2.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, TextIO

from common.reader import InputError, plain_json, read_text
from jobs.definition import experiments as ex
from jobs.definition.body import is_gs
from jobs.definition.errors import JobError, short
from jobs.definition.kinds import runs_study
from jobs.definition.model_registry import output_prefix
from jobs.local.spec import LocalRunError
from trainer.contract import CONFIG_FILE, METRICS_FILE

STORE = "experiments"
MAX_RUNS = 5000  # a definition run locally every minute for three days; more is not a store of runs
# All its run files together at most (a run with 200 data files is about 150 KB, most a few KB): 5,000
# files of 1 MiB each would be 5 GiB to parse before printing a line.
MAX_STORE_BYTES = 256 << 20


def store_folder(local_root: Path, experiment: str) -> Path:
    return Path(local_root) / STORE / experiment


def to_gs(value: str, local_root: Path) -> str:
    """Each path under ``<local root>/gs/`` in ``value`` (one, or a comma list as the trainer's file flags
    hold them) back to the gs:// URI it stands for (environment.to_local's inverse); others as they are."""
    gs_root = Path(local_root) / "gs"

    def one(path: str) -> str:
        try:
            return "gs://" + Path(path).relative_to(gs_root).as_posix() if path else path
        except ValueError:
            return path

    return ",".join(one(p) for p in value.split(","))


def data_files(patterns: list[str], local_root: Path) -> tuple[ex.DataFile, ...]:
    """Each file the trainer's --train-files/--eval-files name (globs expanded), with its identity; at most
    MAX_RUN_DATA_FILES in all."""
    from jobs.local import environment

    found: list[ex.DataFile] = []
    for pattern in patterns:
        for item in (p for p in str(pattern).split(",") if p):
            uri = to_gs(item, local_root)
            if not is_gs(uri):
                continue
            try:
                local = Path(environment.to_local(uri, local_root, "train_files"))
            except LocalRunError:  # an edited trainer_config.json naming a path outside: not read
                continue
            left = ex.MAX_RUN_DATA_FILES - len(found)
            for path in ex.matching_files(local, min(ex.MAX_DATA_FILES, left)) if left > 0 else []:
                found.append(ex.DataFile(to_gs(str(path), local_root), ex.file_identity(path)))
    return tuple(found)


def _json_file(path: Path) -> Any:
    """A small JSON file the trainer wrote, or None when it is missing or unreadable."""
    try:
        return plain_json(read_text(path, "JSON"), str(path))
    except InputError:
        return None


def local_run(job: Any, local_root: Path, status: int, base: Path | None) -> ex.RunRecord | None:
    """The record of a finished ``--local`` run of ``job`` (a CompiledJob) whose outputs are in ``base``;
    None for a job with no base folder, or one it never made (nothing to read its results from)."""
    if base is None or not base.is_dir():
        return None
    state = {0: ex.COMPLETE, 130: ex.CANCELLED}.get(status, ex.FAILED)
    trial = ""
    folder = base
    if runs_study(job.kind):
        summary = _json_file(base / "study.json")
        best = summary.get("best") if isinstance(summary, dict) else None
        if isinstance(best, dict) and best.get("id") is not None:  # study.json's best trial row
            trial = str(best["id"])
            folder = base / trial
    model = folder / "model"
    config = _json_file(model / CONFIG_FILE)
    config = config if isinstance(config, dict) else {}
    params = {k: to_gs(v, local_root) if isinstance(v, str) else v for k, v in ex.flat_params(config).items()}
    patterns = [str(v) for k in ("train_files", "eval_files") for v in [params.get(k)] if v]
    lineage = ex.Lineage(
        code=ex.code_of(job.body, job.kind),
        data=data_files(patterns, local_root),
        model=to_gs(str(model), local_root) if model.is_dir() else "",
        trial=trial,
    )
    return ex.run_record(
        file=job.file,
        run_name=job.job_id,
        display_name=str(job.body.get("displayName") or job.job_id),
        state=state,
        params=params,
        metrics=ex.eval_metrics(_json_file(model / METRICS_FILE)),
        lineage=lineage,
    )


def base_folder(job: Any, local_root: Path) -> Path | None:
    """Where the run wrote its outputs: the mapped baseOutputDirectory (a resumed study's first folder)."""
    from jobs.local import environment
    from jobs.local.run import study_base

    prefix = output_prefix(job.body, job.kind)
    if not is_gs(prefix):
        return None
    base = Path(environment.to_local(prefix, local_root, "baseOutputDirectory"))
    if runs_study(job.kind):
        return study_base(base, local_root, job.body.get("studySpec") or {})
    return base


def write_record(record: ex.RunRecord, local_root: Path, created: str) -> Path:
    """``<local root>/experiments/<experiment>/<run id>.json``, atomically (a temporary file renamed)."""
    folder = store_folder(local_root, record.experiment_id)
    folder.mkdir(parents=True, exist_ok=True)
    document = record.document()
    document["run"] = {**document["run"], "createTime": created}
    target = folder / f"{record.run_id}.json"
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".json")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            json.dump(document, file, indent=2, sort_keys=True)
            file.write("\n")
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def record_run(job: Any, local_root: Path, status: int, created: str, out: TextIO) -> None:
    """Record a finished local run; a run that wrote no base folder records nothing."""
    try:
        record = local_run(job, local_root, status, base_folder(job, local_root))
        if record is None:
            return
        path = write_record(record, local_root, created)
    except OSError as exc:  # the run itself is done: say why it is not listed, change nothing else
        print(f"experiments: the run was not recorded ({exc.strerror or exc})", file=out)
        return
    print(f"experiments: recorded run {record.run_id} of {record.experiment_id} in {path}", file=out)


def read_runs(local_root: Path, experiment: str, where: str) -> list[ex.Run]:
    """Every run of ``experiment`` in the local store; a JobError (at ``where``) when there is none or a
    file in the folder is not a run."""
    folder = store_folder(local_root, experiment)
    allowed = f"a folder of run files that `run_job.py {where} --local` wrote"
    if not folder.is_dir():
        raise JobError(where, "--local-root", f"no run of experiment {experiment} under {folder}",
                       f"a local root where `run_job.py {where} --local` ran")
    names = []
    with os.scandir(folder) as entries:
        for entry in entries:
            if entry.name.startswith(".tmp-"):
                continue  # a writer's temporary file, renamed (or removed) when it is done
            names.append(entry.name)
            if len(names) > MAX_RUNS:
                raise JobError(where, str(folder), f"more than {MAX_RUNS} entries", allowed)
    total = 0
    for name in names:
        try:
            total += os.stat(folder / name).st_size  # what is not a regular file is refused below
        except OSError:
            continue
        if total > MAX_STORE_BYTES:
            raise JobError(where, str(folder), f"more than {MAX_STORE_BYTES >> 20} MiB of run files",
                           allowed)
    runs = []
    for name in sorted(names):
        path = folder / name
        try:
            document = plain_json(read_text(path, allowed), str(path))
        except InputError as exc:
            raise JobError(exc.file, exc.where, exc.problem, exc.allowed or allowed) from None
        try:
            if not isinstance(document, dict) or f"{document.get('runId')}.json" != name:
                raise ex.RunError(f"runId must be the file's name, {short(name)} without .json")
            runs.append(ex.run_of(document.get("run"), str(document["runId"])))
        except ex.RunError as exc:
            raise JobError(str(path), "run", str(exc), allowed) from None
    if not runs:
        raise JobError(where, "--local-root", f"no run of experiment {experiment} under {folder}",
                       f"a local root where `run_job.py {where} --local` ran")
    return runs
