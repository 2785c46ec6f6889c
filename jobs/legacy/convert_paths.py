"""A legacy job's gs:// paths -> this environment's buckets (``${infra.<bucket output>}``), and its jobDir ->
baseOutputDirectory with a folder per run."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from common.gcs import BUCKET_URI, GS
from infra.outputs import BUCKET_OUTPUTS as INFRA_BUCKET_OUTPUTS
from jobs.definition.body import is_gs
from jobs.definition.errors import short
from jobs.legacy.convert_fields import read_text
from jobs.legacy.convert_types import Conversion
from jobs.legacy.shell_words import Unknown, Word
from jobs.legacy.source import TRAINING_INPUT as T
from jobs.legacy.source import LegacyJob, shell_values

# The outputs whose buckets a legacy gs:// path may turn out to be (infra's bucket outputs), in the order they
# are tried and listed: by name.
BUCKET_OUTPUTS = tuple(sorted(INFRA_BUCKET_OUTPUTS))


class Buckets:
    """gs:// paths in buckets of this environment -> ${infra.<bucket output>} (noted once per bucket)."""

    def __init__(
        self, outputs: Mapping[str, str], out: Conversion, mapped: Sequence[tuple[str, str]] = ()
    ) -> None:
        self.refs = {
            str(outputs[k]): k for k in BUCKET_OUTPUTS if is_gs(outputs.get(k, ""))
        }
        self.mapped = dict(mapped)
        self.refs.update(self.mapped)
        self.outputs = outputs
        self.out = out
        self.seen: set[str] = set()

    def refer(self, text: str) -> str:
        def swap(found: re.Match) -> str:
            bucket = found.group(0)
            key = self.refs.get(bucket)
            if bucket not in self.seen:
                self.seen.add(bucket)
                if bucket in self.mapped:
                    target = self.outputs.get(key, key)
                    self.out.decisions.append(
                        f"{bucket} -> ${{infra.{key}}} (--map-bucket): copy its objects into {target} first "
                        f"(gcloud storage cp -r {bucket}/<path> {target}/<path>)"
                    )
                elif key:
                    self.out.decisions.append(
                        f"{bucket} is this environment's {key}: written as ${{infra.{key}}}"
                    )
                else:
                    self.out.decisions.append(
                        f"{bucket} is not a bucket of this environment: grant the runtime service account "
                        "access to it, or move the paths into the environment's buckets "
                        "(${infra.data_bucket}, ${infra.models_bucket}; convert --map-bucket writes them so)"
                    )
            return f"${{infra.{key}}}" if key else bucket

        return BUCKET_URI.sub(swap, text)


def output_dir(legacy: LegacyJob, out: Conversion, buckets: Buckets, tuning: bool) -> str:
    path = f"{T}.jobDir"
    raw = legacy.training.get("jobDir")
    per_trial = " (trial N under <prefix>/N)" if tuning else ""
    if raw is None:
        default = "${infra.models_bucket}/${job.name}/${job.id}"
        out.decisions.append(f"no jobDir -> baseOutputDirectory {default}{per_trial}")
        return default
    word = raw if isinstance(raw, Word) else Word((read_text(legacy, path, raw, "gs://bucket/path"),))
    text = word.show()
    if word.parts and isinstance(word.parts[0], Unknown):
        first = word.parts[0]
        raise legacy.error(path, f"{text}: {first.source} is {first.reason}", shell_values([first]))
    if not is_gs(text):
        raise legacy.error(path, f"{short(text)} is not a gs:// URI", "gs://<bucket>/<path>")
    job_id = legacy.job.get("jobId")
    segments = _segments(word)
    if segments[0][1]:
        unknown = word.unknowns[0]
        raise legacy.error(
            path, f"{text}: {unknown.source} (in the bucket) is {unknown.reason}", shell_values([unknown])
        )
    # A per-run folder (the job name, or anything only the shell knew, like $(date ...)) becomes ${job.id}:
    # Vertex AI job ids are unique per submission, so each run keeps its own outputs.
    cut = next(
        (
            i
            for i, (seg, dynamic) in enumerate(segments)
            if i >= 1 and (dynamic or (job_id and seg == job_id))
        ),
        None,
    )
    if cut is not None:
        prefix = "/".join(seg for seg, _ in segments[:cut])
        converted = buckets.refer(f"{GS}{prefix}") + "/${job.id}"
        out.decisions.append(
            f"jobDir {text} -> baseOutputDirectory {converted}: the per-run folder is the Vertex AI job id"
            + per_trial
        )
        return converted
    converted = buckets.refer(text.rstrip("/")) + "/${job.id}"
    out.decisions.append(
        f"jobDir {text} -> baseOutputDirectory {converted}: a folder per run, so a rerun never overwrites "
        f"the last model{per_trial}"
    )
    return converted


def _segments(word: Word) -> list[tuple[str, bool]]:
    """The segments after gs:// (bucket first), each with whether it holds a part only the shell knew."""
    segments = word.segments()
    while len(segments) > 3 and not segments[-1].parts:  # a trailing slash
        segments.pop()
    return [(s.show(), bool(s.unknowns)) for s in segments[2:]]  # "gs:", "" before the bucket
