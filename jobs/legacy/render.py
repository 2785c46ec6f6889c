"""A conversion as the definition file `run_job.py convert` writes: the YAML, headed by what it came from, how
to run it, every decision and what could not be carried over."""


from __future__ import annotations

import textwrap

import yaml

from jobs.legacy.convert_types import Conversion
from jobs.legacy.source import LegacyJob

WIDTH = 110


def render(conversion: Conversion, legacy: LegacyJob, *, source: str, output: str, command: str) -> str:
    """The definition's YAML, headed by what it came from, how to run it, the decisions and the losses."""
    job_id = legacy.job.get("jobId")
    lines = [
        f"Converted from legacy AI Platform Training: {source}" + (f" (job {job_id})" if job_id else ""),
        f"  {command}",
        "Review the decisions below, then:",
        f"  python scripts/run_job.py {output} --dry-run",
        f"  python scripts/run_job.py {output} --local",
        "",
        "Decisions:",
    ]
    lines += _items(conversion.decisions)
    if conversion.lost:
        lines += ["", "Not carried over (`convert --strict` refuses these):"]
        lines += _items(f"{legacy.describe(path)}: {why}" for path, why in conversion.lost)
    header = "".join(f"# {line}".rstrip() + "\n" for line in lines)
    return header + yaml.dump(conversion.definition, Dumper=_Dumper, sort_keys=False, width=WIDTH)


def _items(items) -> list[str]:
    out = []
    for item in items:
        out += textwrap.wrap(
            item,
            WIDTH - 2,
            initial_indent="- ",
            subsequent_indent="  ",
            break_long_words=False,
            break_on_hyphens=False,  # paths and machine names stay whole
        )
    return out


class _Dumper(yaml.SafeDumper):
    """Block style; the program every pool shares is written once, as &trainer (like the shipped files)."""

    def generate_anchor(self, node):  # noqa: D102 - PyYAML hook
        self.last_anchor_id += 1
        return "trainer" if self.last_anchor_id == 1 else f"trainer{self.last_anchor_id}"

    def increase_indent(self, flow=False, indentless=False):  # noqa: D102 - lists indented under their key
        return super().increase_indent(flow, False)
