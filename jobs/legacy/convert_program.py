"""A legacy job's args -> the program every pool runs: this repo's trainer with the flags its model takes
(legacy names aliased, ``--job-dir`` left to Vertex AI, unknown flags reported), in the trainer image or as
the sdist on a prebuilt image."""

from __future__ import annotations

import re

from jobs.definition.compile import CONTAINER, PYTHON_PACKAGE
from jobs.definition.errors import JobError, one_of, short
from jobs.definition.image import RUNNABLE_PREBUILT, parse_prebuilt
from jobs.definition.trainer_spec import TrainerArgsError, TrainerSpec
from jobs.legacy import tables
from jobs.legacy.convert_paths import Buckets
from jobs.legacy.convert_types import Conversion, Options
from jobs.legacy.source import TRAINING_INPUT as T
from jobs.legacy.source import LegacyJob
from trainer.contract import TRAINER_MODULE

# variant -> the prebuilt image the trainer sdist runs on (python-package delivery): image.py's list, keyed.
PREBUILT = {parse_prebuilt(uri).variant: uri for uri in RUNNABLE_PREBUILT}


def _groups(args: list[str]) -> list[list[str]]:
    """Args as flag groups: ``--flag`` and the values up to the next ``--flag`` (positionals first)."""
    groups: list[list[str]] = [[]]
    for arg in args:
        if arg.startswith("--") and len(arg) > 2:
            groups.append([arg])
        else:
            groups[-1].append(arg)
    return groups


def _flag_name(arg: str) -> str:
    return arg.split("=", 1)[0]


def trainer_args(
    legacy: LegacyJob,
    contract: TrainerSpec,
    options: Options,
    out: Conversion,
    buckets: Buckets,
    tuning: bool,
    variant: str,
) -> tuple[list[str], str]:
    path = f"{T}.args"
    raw = legacy.training.get("args") or []
    if not isinstance(raw, list) or not all(isinstance(a, (str, int, float)) for a in raw):
        raise legacy.error(path, "must be a list of strings", "the trainer's command-line arguments")
    legacy_args = [str(a) for a in raw]
    extra = list(options.extra_args)
    extra_flags = {_flag_name(g[0]) for g in _groups(extra)[1:]}
    model = options.model or contract.model_of([*legacy_args, *extra])
    if contract.model(model) is None:
        raise JobError(legacy.file, "--model", f"unknown model {short(model)}", one_of(contract.models))
    flags = contract.model(model).flags
    kept: list[str] = [f"--model={model}"]
    positional, *groups = _groups(legacy_args)
    if positional:
        out.lost.append(
            (path, f"positional arguments {short(' '.join(positional))}: the trainer takes flags only")
        )
    start = len(positional)
    for group in groups:
        at, start = f"{path}.{start}", start + len(group)  # the group's first arg, for its line
        name = _flag_name(group[0])
        alias = flag_alias(name, flags)
        if alias:
            out.decisions.append(f"args {name} -> {alias}: this trainer's name for it")
            group = [alias + group[0][len(name) :], *group[1:]]
            name = alias
        if name in ("--model", "--job-dir", "--job_dir") or name in extra_flags:
            if name in ("--job-dir", "--job_dir"):
                out.decisions.append(
                    f"args {name}: dropped; Vertex AI gives the trainer AIP_MODEL_DIR, AIP_CHECKPOINT_DIR "
                    "and AIP_TENSORBOARD_LOG_DIR under baseOutputDirectory, which it prefers"
                )
            elif name in extra_flags:
                out.decisions.append(f"args {name}: replaced by the value given to `convert` after `--`")
            continue
        if name not in flags:
            shown = short(" ".join(group), quote=False)
            out.lost.append((at, f"{shown}: not a flag of the trainer's {model} model"))
            continue
        kept.extend(buckets.refer(a) for a in group)
    kept.extend(buckets.refer(a) for g in _groups(extra)[1:] for a in g if _flag_name(g[0]) != "--model")
    if variant == "tpu" and not any(_flag_name(a) == "--distribution" for a in kept):
        kept.append("--distribution=tpu")
        out.decisions.append("--distribution=tpu added: the trainer builds TPUStrategy on the TPU VM")
    return kept, model


def check_trainer_args(legacy: LegacyJob, contract: TrainerSpec, args: list[str]) -> None:
    try:
        contract.check_args(args)
    except TrainerArgsError as exc:
        missing = re.search(r"required: (.*)", str(exc))
        allowed = (
            "add them after `--` in the submit command or to trainingInput.args, or give them to convert: "
            "run_job.py convert FILE -- --train-files=gs://... --eval-files=gs://..."
        )
        problem = f"the trainer needs {missing.group(1)}" if missing else f"the trainer refuses them: {exc}"
        raise legacy.error(
            f"{T}.args", problem, allowed if missing else "the trainer's flags (--help)"
        ) from None


def program_spec(legacy: LegacyJob, options: Options, out: Conversion, variant: str, args: list[str]) -> dict:
    if options.delivery == PYTHON_PACKAGE:
        if variant not in PREBUILT:
            raise JobError(
                legacy.file,
                "--delivery",
                f"{options.delivery} on a TPU: no prebuilt TensorFlow image runs the trainer there",
                CONTAINER,
            )
        return {
            "pythonPackageSpec": {
                "executorImageUri": PREBUILT[variant],
                "packageUris": ["${job.package_uri}"],
                "pythonModule": TRAINER_MODULE,
                "args": args,
            }
        }
    return {
        "containerSpec": {"imageUri": f"${{infra.trainer_image}}:{variant}-${{job.image_tag}}", "args": args}
    }


def flag_alias(flag: str, flags: frozenset[str]) -> str | None:
    """This trainer's flag for a legacy sample's flag it lacks (--batch-size -> --train-batch-size)."""
    alias = tables.FLAG_ALIASES.get(flag.removeprefix("--").replace("_", "-"))
    return f"--{alias}" if alias and flag not in flags and f"--{alias}" in flags else None
