"""Read what a team kept from legacy AI Platform Training into one ``projects.jobs`` resource.

Three forms come in: a ``--config`` file (YAML or JSON; a bare TrainingInput, ``{trainingInput: ...}``, or the
whole job resource with ``jobId`` as ``gcloud ai-platform jobs describe`` printed it), or a shell script whose
`gcloud ai-platform|ml-engine jobs submit training` command names such a file and flags. The command's flags
are merged over the file as gcloud merged them (``BuildTrainingJob``: a flag that is given replaces the file's
field; ``--labels`` replaces all labels; the arguments after ``--`` replace ``args``).

Every value remembers where it was written, so an error names that file, field and line.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common import reader
from jobs.definition.errors import JobError, one_of
from jobs.definition.loader import Document, load_text, read_text_file
from jobs.legacy import shell, tables
from jobs.legacy.shell_words import Part, ShellError, Unknown, Word

ALLOWED_FILE = (
    "a legacy AI Platform config (YAML or JSON TrainingInput/job) or a shell script with its submit command"
)
SCRIPT_SUFFIXES = (".sh", ".bash")
TRAINING_INPUT = "trainingInput"
USER_ARGS = "USER_ARGS (after --)"
SHELL_VALUES = (
    "a literal value, a VAR=value assigned earlier in the script, or run_job.py convert --var NAME=VALUE"
)


@dataclass(frozen=True)
class Origin:
    file: str
    field: str
    line: int | None = None


@dataclass
class LegacyJob:
    """A legacy training job: ``{"jobId", "labels", "trainingInput"}``, and where each part came from."""

    file: str  # the file the user converted
    job: dict[str, Any]
    document: Document | None = None  # the config file, for the lines of its fields
    wrapped: bool = True  # the config file has the trainingInput level (else it is a bare TrainingInput)
    origins: dict[str, Origin] = field(default_factory=dict)  # job path -> the command-line flag that set it
    ignored_flags: tuple[str, ...] = ()  # gcloud flags with no bearing on the job (--stream-logs, --project)
    config_note: str = ""  # where the script's --config was found, when that was not beside the script

    @property
    def training(self) -> dict[str, Any]:
        return self.job.setdefault(TRAINING_INPUT, {})

    def where(self, path: str) -> Origin:
        """The file, field and line a job path (``trainingInput.masterType``) was written at."""
        for key in sorted(self.origins, key=len, reverse=True):
            if path == key or path.startswith(key + "."):
                return self.origins[key]
        if self.document is None:
            return Origin(self.file, path)
        file_path = path if self.wrapped else path.removeprefix(TRAINING_INPUT + ".")
        return Origin(self.document.file, file_path, self.document.line_of(file_path))

    def error(self, path: str, problem: str, allowed: str = "") -> JobError:
        origin = self.where(path)
        line = f" (line {origin.line})" if origin.line else ""
        return JobError(origin.file, origin.field, problem + line, allowed)

    def describe(self, path: str) -> str:
        """Where a value came from, for the notes of the emitted file: ``--scale-tier`` or ``masterType``."""
        origin = self.where(path)
        place = "" if origin.file == self.file else f"{os.path.basename(origin.file)} "
        line = f"line {origin.line}" if origin.line else ""
        return f"{origin.field} ({place}{line})" if place or line else origin.field


def read(path: str | Path, variables: dict[str, str] | None = None) -> LegacyJob:
    """The legacy job a config file or a submit script describes."""
    file = str(path)
    text = read_text_file(path, ALLOWED_FILE, missing="no such file")
    if file.endswith(SCRIPT_SUFFIXES) or text.startswith("#!"):
        return _read_script(file, text, variables or {})
    document, wrapped = _config_document(file, text)
    return LegacyJob(file, _job_of(document, wrapped), document, wrapped)


def _config_document(file: str, text: str) -> tuple[Document, bool]:
    if text.lstrip().startswith(("{", "[")):
        try:
            reader.plain_json(text, file)
        except reader.InputError as exc:  # malformed, too deep, a number of thousands of digits
            raise JobError(exc.file, exc.where, exc.problem, exc.allowed) from None
        # Valid JSON holds tabs only between tokens (a raw tab inside a string is invalid): YAML, which reads
        # it for the lines of its fields, does not allow them there.
        text = text.replace("\t", " ")
    document = load_text(text, file)
    data = document.data
    if TRAINING_INPUT in data:
        unknown = [k for k in data if k not in (*tables.JOB_FIELDS, *tables.JOB_OUTPUT_FIELDS)]
        if unknown:
            line = document.line_of(unknown[0])
            raise JobError(
                file,
                unknown[0],
                f"not a field of a legacy training job (line {line})",
                one_of(tables.JOB_FIELDS),
            )
        if not isinstance(data[TRAINING_INPUT], dict):
            raise JobError(file, TRAINING_INPUT, "must be a mapping", "TrainingInput fields")
        return document, True
    if "predictionInput" in data:
        raise JobError(file, "predictionInput", "a batch prediction job", "a training job (trainingInput)")
    unknown = [k for k in data if k not in tables.TRAINING_INPUT_FIELDS]
    if unknown:
        line = document.line_of(unknown[0])
        hint = (
            " (a Vertex AI definition? run it as it is)" if unknown[0] in ("workerPoolSpecs", "kind") else ""
        )
        raise JobError(
            file,
            unknown[0],
            f"not a field of a legacy TrainingInput (line {line}){hint}",
            one_of(tables.TRAINING_INPUT_FIELDS) + "; or trainingInput: {...}",
        )
    return document, False


def _job_of(document: Document, wrapped: bool) -> dict[str, Any]:
    data = dict(document.data)
    if wrapped:
        for key in tables.JOB_OUTPUT_FIELDS:
            data.pop(key, None)
        return data
    return {TRAINING_INPUT: data}


# gcloud ai-platform|ml-engine jobs submit training: flag -> (kind, TrainingInput path it sets).
# kinds: value, int, bool (no value), boolean (a true/false value), accelerator, labels, list, ignored.
_ROLES = {"master": "master", "worker": "worker", "parameter-server": "parameterServer"}
FLAGS: dict[str, tuple[str, str]] = {
    "--config": ("value", ""),
    "--job-dir": ("value", "jobDir"),
    "--labels": ("labels", "labels"),
    "--module-name": ("value", "pythonModule"),
    "--package-path": ("value", "packageUris"),
    "--packages": ("list", "packageUris"),
    "--python-version": ("value", "pythonVersion"),
    "--region": ("value", "region"),
    "--runtime-version": ("value", "runtimeVersion"),
    "--scale-tier": ("tier", "scaleTier"),
    "--service-account": ("value", "serviceAccount"),
    "--network": ("value", "network"),
    "--enable-web-access": ("bool", "enableWebAccess"),
    "--use-chief-in-tf-config": ("boolean", "useChiefInTfConfig"),
    "--tpu-tf-version": ("value", "workerConfig.tpuTfVersion"),
    "--kms-key": ("value", "encryptionConfig.kmsKeyName"),
    "--kms-keyring": ("value", "encryptionConfig.kmsKeyring"),
    "--kms-location": ("value", "encryptionConfig.kmsLocation"),
    "--kms-project": ("value", "encryptionConfig.kmsProject"),
    "--staging-bucket": ("ignored", "a staging bucket for gcloud's upload of the package"),
    "--async": ("ignored-bool", "run_job.py --no-wait"),
    "--stream-logs": ("ignored-bool", "run_job.py follows the job by default"),
    "--project": ("ignored", "the project comes from the environment's infra outputs (--env)"),
    "--account": ("ignored", "gcloud's credentials"),
    "--billing-project": ("ignored", "gcloud's billing project"),
    "--configuration": ("ignored", "gcloud's named configuration"),
    "--impersonate-service-account": ("ignored", "gcloud's credentials"),
    "--format": ("ignored", "gcloud's output format"),
    "--verbosity": ("ignored", "gcloud's log level"),
    "--quiet": ("ignored-bool", "gcloud's prompts"),
    "-q": ("ignored-bool", "gcloud's prompts"),
    "--log-http": ("ignored-bool", "gcloud's HTTP log"),
    "--user-output-enabled": ("ignored", "gcloud's output"),
    "--trace-token": ("ignored", "gcloud's tracing"),
}
for _flag, _role in _ROLES.items():
    FLAGS[f"--{_flag}-machine-type"] = ("value", f"{_role}Type")
    FLAGS[f"--{_flag}-accelerator"] = ("accelerator", f"{_role}Config.acceleratorConfig")
    FLAGS[f"--{_flag}-image-uri"] = ("value", f"{_role}Config.imageUri")
for _flag, _role in (("worker", "worker"), ("parameter-server", "parameterServer")):
    FLAGS[f"--{_flag}-count"] = ("int", f"{_role}Count")
# Flags whose value is only ever shown, never evaluated: the job dir (the converter understands a per-run
# folder only the shell knew, and refuses an unknown bucket itself) and container images, which are reported
# as not carried over (the job runs this repo's trainer image) whatever they were.
SHOWN_FLAGS = ("--job-dir", *(f"--{flag}-image-uri" for flag in _ROLES))
_GROUPS = ("ai-platform", "ml-engine")
_TRACKS = ("alpha", "beta")


def _read_script(file: str, text: str, variables: dict[str, str]) -> LegacyJob:
    try:
        script = shell.parse(text, variables)
    except ShellError as exc:
        raise JobError(file, f"line {exc.line}", exc.problem, exc.allowed) from None
    submits = [c for c in script.commands if _submit_words(c) is not None]
    if not submits:
        raise JobError(
            file,
            "(script)",
            "no `gcloud ai-platform jobs submit training` command",
            "a script with one `gcloud ai-platform|ml-engine jobs submit training JOB ...` command",
        )
    if len(submits) > 1:
        lines = ", ".join(str(c.line) for c in submits)
        raise JobError(
            file,
            f"line {submits[1].line}",
            f"{len(submits)} submit commands (lines {lines})",
            "one per script",
        )
    return _merge_command(file, _submit_words(submits[0]) or [])


def _submit_words(command: shell.Command) -> list[tuple[Word, int]] | None:
    """The words after `gcloud [track] ai-platform|ml-engine jobs submit training`, each with its line."""
    words = command.words
    head = [w.literal for w in words[:6]]
    if not head or not head[0] or os.path.basename(head[0]) != "gcloud":
        return None
    i = 2 if len(head) > 1 and head[1] in _TRACKS else 1
    if len(head) < i + 4 or head[i] not in _GROUPS or head[i + 1 : i + 4] != ["jobs", "submit", "training"]:
        return None
    return list(zip(words, command.lines, strict=True))[i + 4 :]


def shell_values(unknowns: tuple[Unknown, ...] | list[Unknown]) -> str:
    """What the user can do about values only the running script knew: set each variable behind them."""
    if not unknowns or any(not u.name for u in unknowns):  # $(...) or $1 in the command itself
        return SHELL_VALUES
    given = " ".join(dict.fromkeys(f"--var {u.name}=VALUE" for u in unknowns))
    return f"run_job.py convert FILE {given} (what the script ran with), or literal values in the script"


def _unknown_error(
    file: str, line: int, flag: str, unknown: Unknown, needed: list[Unknown]
) -> JobError:
    others = [u for u in needed if (u.name or u.source) != (unknown.name or unknown.source)]
    also = ", ".join(dict.fromkeys(f"${u.name}" if u.name else u.source for u in others))
    return JobError(
        file,
        flag,
        f"{unknown.source} is {unknown.reason}, known only when the script runs (line {line})"
        + (f"; the command also needs {also}" if also else ""),
        shell_values([unknown, *others]),
    )


def _literal(file: str, line: int, flag: str, word: Word, needed: list[Unknown]) -> str:
    if word.literal is None:
        raise _unknown_error(file, line, flag, word.unknowns[0], needed)
    return word.literal


def _needed(flags: _Flags) -> list[Unknown]:
    """Everything the conversion needs a value for and only the running script knew, in command order: one
    refusal names them all, so setting them takes one rerun, not one per variable."""
    words = [
        word
        for name, (word, _) in flags.values.items()
        if not FLAGS[name][0].startswith("ignored") and name not in SHOWN_FLAGS
    ]
    words += [word for word, _ in flags.user_args or ()]
    if "--job-dir" in flags.values:  # only up to its bucket: a per-run folder after it becomes ${job.id}
        words += flags.values["--job-dir"][0].segments()[:3]
    unknowns = [u for word in words for u in word.unknowns]
    found: dict[str, Unknown] = {}
    for unknown in unknowns:
        found.setdefault(unknown.name or unknown.source, unknown)
    return list(found.values())


@dataclass
class _Flags:
    values: dict[str, tuple[Word, int]] = field(default_factory=dict)  # flag -> (its value, its line)
    job: tuple[Word, int] | None = None
    user_args: list[tuple[Word, int]] | None = None


def _parse_flags(file: str, words: list[tuple[Word, int]]) -> _Flags:
    parsed = _Flags()
    i = 0
    while i < len(words):
        word, line = words[i]
        text = word.show()
        if text == "--":
            parsed.user_args = words[i + 1 :]
            break
        if text.startswith("-") and text != "-":
            name, eq, _ = text.partition("=")
            if name not in FLAGS:
                raise JobError(
                    file,
                    name,
                    f"not a flag of `gcloud ai-platform jobs submit training` (line {line})",
                    one_of(sorted(FLAGS)),
                )
            kind = FLAGS[name][0]
            if kind in ("bool", "ignored-bool"):
                parsed.values[name] = (Word(("true",)), line)
                i += 1
                continue
            if eq:
                parsed.values[name] = (Word(tuple(_after_equals(word))), line)
                i += 1
            elif i + 1 < len(words):
                parsed.values[name] = (words[i + 1][0], line)
                i += 2
            else:
                raise JobError(file, name, f"has no value (line {line})", "--flag VALUE or --flag=VALUE")
            continue
        if parsed.job is not None and word.unknowns:
            # `$EXTRA_FLAGS` that the script set in a branch, or never: its words are known only at run time.
            raise _unknown_error(file, line, "(command)", word.unknowns[0], [])
        if parsed.job is not None:
            raise JobError(
                file,
                "JOB",
                f"a second positional argument {text!r} (line {line})",
                "one job name, then flags",
            )
        parsed.job = (word, line)
        i += 1
    return parsed


def _after_equals(word: Word) -> list[Part]:
    out: list[Part] = []
    seen = False
    for part in word.parts:
        if not seen and isinstance(part, str) and "=" in part:
            part = part.split("=", 1)[1]
            seen = True
        elif not seen:
            continue
        out.append(part)
    return out


def _merge_command(file: str, words: list[tuple[Word, int]]) -> LegacyJob:
    folder = str(Path(file).resolve().parent)  # `$(dirname "$0")` and the like, filled in once
    flags = _parse_flags(file, [(word.in_folder(folder), line) for word, line in words])
    needed = _needed(flags)
    legacy = LegacyJob(file, {TRAINING_INPUT: {}})
    if "--config" in flags.values:
        word, line = flags.values["--config"]
        resolved = _config_path(file, line, _literal(file, line, "--config", word, needed))
        text = read_text_file(resolved, ALLOWED_FILE, missing=f"--config {resolved}: no such file")
        document, wrapped = _config_document(str(resolved), text)
        legacy = LegacyJob(file, _job_of(document, wrapped), document, wrapped)
        if resolved.parent.resolve() != Path(file).parent.resolve():
            legacy.config_note = (
                f"--config {word.show()} (line {line}) read from {resolved}: not beside the script, so from "
                "the folder convert ran in, as gcloud read it from the folder the script ran in"
            )
    training = legacy.training
    if flags.job is not None:
        job, line = flags.job
        legacy.job["jobId"] = job.show()  # may be dynamic (census_$(date ...)): only ever a label
        legacy.origins["jobId"] = Origin(file, "JOB", line)
    for name, (word, line) in flags.values.items():
        kind, target = FLAGS[name]
        if name == "--config" or kind.startswith("ignored"):
            continue
        value: Any
        if kind == "bool":
            value = True
        elif kind == "labels":
            value = _labels(file, line, _literal(file, line, name, word, needed))
        elif target == "jobDir":
            value = word  # a per-run folder only the shell knows is understood by the converter
        elif name in SHOWN_FLAGS:
            value = word.show()
        else:
            value = _typed(file, line, name, kind, _literal(file, line, name, word, needed))
        path = target if target == "labels" else f"{TRAINING_INPUT}.{target}"
        _set(legacy.job, path, value)
        legacy.origins[path] = Origin(file, name, line)
    # As gcloud's RemainderAction: without `--` the user args are None and the config's args stand; a
    # bare `--` gives [] and clears them.
    if flags.user_args is not None:
        training["args"] = [_literal(file, line, USER_ARGS, w, needed) for w, line in flags.user_args]
        first = flags.user_args[0][1] if flags.user_args else None
        legacy.origins[f"{TRAINING_INPUT}.args"] = Origin(file, USER_ARGS, first)
        for i, (_, line) in enumerate(flags.user_args):
            legacy.origins[f"{TRAINING_INPUT}.args.{i}"] = Origin(file, USER_ARGS, line)
    legacy.ignored_flags = tuple(n for n in flags.values if FLAGS[n][0].startswith("ignored"))
    return legacy


def _config_path(file: str, line: int, config: str) -> Path:
    """The --config file, relative to the script's folder, else to the folder convert runs in: gcloud read it
    relative to the folder the script was run from, often the script's parent (`./scripts/train-cloud.sh`
    with `--config ./config.yaml` in Google's samples)."""
    if os.path.isabs(config):
        candidates = [Path(config)]
    else:
        candidates = [Path(file).parent / config, Path(config)]
    for candidate in candidates:
        if candidate.exists() or candidate.is_symlink():
            return candidate
    places = " or ".join(dict.fromkeys(str(c.parent.resolve()) for c in candidates))
    raise JobError(
        file,
        "--config",
        f"{config}: no such file in {places} (line {line})",
        "run convert in the folder the script ran in, or give the config's path in the script",
    )


def _is_count(text: str) -> bool:
    """ASCII digits only (int() refuses '²', which isdigit() accepts), and not thousands of them (int() of
    over 4,300 digits is a ValueError)."""
    return text.isascii() and text.isdigit() and len(text) <= reader.MAX_NUMBER_CHARS


def _typed(file: str, line: int, name: str, kind: str, text: str) -> Any:
    if kind == "int":
        if not _is_count(text):
            problem = f"{reader.shown(text)} is not a count (line {line})"
            raise JobError(file, name, problem, "an integer >= 0")
        return int(text)
    if kind == "boolean":
        if text.lower() not in ("true", "false"):
            raise JobError(file, name, f"{text!r} (line {line})", "true, false")
        return text.lower() == "true"
    if kind == "tier":
        return text.upper().replace("-", "_")
    if kind == "list":
        return [p for p in text.split(",") if p]
    if kind == "accelerator":
        spec: dict[str, Any] = {}
        for item in text.split(","):
            key, _, value = item.partition("=")
            if key == "count" and _is_count(value):
                spec["count"] = int(value)
            elif key == "type" and value:
                spec["type"] = value.upper().replace("-", "_")
            else:
                raise JobError(file, name, f"{text!r} (line {line})", "count=COUNT,type=TYPE")
        return spec
    return text


MAX_LABELS = 64  # what Vertex AI (and gcloud before it) takes on a job


def _labels(file: str, line: int, text: str) -> dict[str, str]:
    items = text.split(",")
    if len(items) > MAX_LABELS:
        raise JobError(file, "--labels", f"{len(items)} labels (line {line})", f"at most {MAX_LABELS}")
    labels = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not key or not eq:
            raise JobError(file, "--labels", f"{item!r} is not KEY=VALUE (line {line})", "KEY=VALUE,...")
        labels[key] = value
    return labels


def _set(root: dict[str, Any], path: str, value: Any) -> None:
    keys = path.split(".")
    node = root
    for key in keys[:-1]:
        child = node.get(key)
        if not isinstance(child, dict):
            child = node[key] = {}
        node = child
    node[keys[-1]] = value
