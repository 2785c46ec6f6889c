"""A hostile value given to run_job.py (100 KB, control characters, newlines) in a flag, a --set, a field of a
job file, a resource name, a model folder or a convert option comes back in one short line that still names
the flag or field: every error that repeats a user's value shows it through jobs.definition.errors.short."""

from __future__ import annotations

import io
import json
import shlex

import pytest

from jobs.cli.run_job import main
from tests.jobs.helpers import CODE_HASH, CUSTOM, IMAGE_HASH, NOW, OUTPUTS, REPO_ROOT

VALUES = {
    "100KB": "a" * 100_000,
    "control": "x\x1b[2J\x07y\rz\u202e" * 4,  # clear the screen, bell, carriage return, bidi override
    "newlines": "a\n" * 5_000,
}
BENIGN = "X!"  # a short value every row refuses
MAX_LINE = 300
# An error whose own words are long (a list of allowed machine types) may exceed MAX_LINE with any value; the
# hostile value's share of it is then what is bounded: its start and its length, quoted.
VALUE_SHARE = 100
CPU = "jobs/census_cpu.yaml"
TUNING = "jobs/census_tuning.yaml"
LEGACY = "tests/jobs/legacy/hptuning_config.yaml"
DATA = ["--", "--train-files=gs://demo-project-data/a", "--eval-files=gs://demo-project-data/b"]

# id, argv for value v (a list, or a callable of (v, tmp_path)), what the line names, real outputs (not fixed)
ROWS = [
    ("service-account", lambda v: [CPU, "--dry-run", "--service-account", v], "--service-account", False),
    ("kms-key", lambda v: [CPU, "--dry-run", "--kms-key", v], "--kms-key", False),
    ("network", lambda v: [CPU, "--dry-run", "--network", v], "--network", False),
    ("labels", lambda v: [CPU, "--dry-run", "--labels", v], "--labels", False),
    ("label-value", lambda v: [CPU, "--dry-run", "--labels", f"k={v}"], "--labels", False),
    ("args", lambda v: [CPU, "--dry-run", "--args", v], "--args", False),
    ("max-trial-count", lambda v: [TUNING, "--dry-run", "--max-trial-count", v], "--max-trial-count", False),
    ("algorithm", lambda v: [TUNING, "--dry-run", "--algorithm", v], "--algorithm", False),
    ("env", lambda v: [CPU, "--dry-run", "--env", v], "--env", True),
    ("outputs-file", lambda v: [CPU, "--dry-run", "--outputs-file", v], "--outputs-file", True),
    ("report-dir", lambda v: [CPU, "--report-dir", v], "--report-dir", False),
    ("set-path", lambda v: [CPU, "--dry-run", "--set", f"{v}=1"], "--set", False),
    ("set-no-value", lambda v: [CPU, "--dry-run", "--set", v], "--set", False),
    (
        "set-account",
        lambda v: [CPU, "--dry-run", "--set", f"jobSpec.serviceAccount={json.dumps(v)}"],
        "jobSpec.serviceAccount",
        False,
    ),
    (
        "set-reference",
        lambda v: [CPU, "--dry-run", "--set", "displayName=${infra." + v + "}"],
        "displayName",
        False,
    ),
    (
        "set-parameter-id",
        lambda v: [TUNING, "--dry-run", "--set", f"studySpec.parameters.0.parameterId={json.dumps(v)}"],
        "studySpec.parameters.0.parameterId",
        False,
    ),
    ("file-machine-type", "file", "jobSpec.workerPoolSpecs.0.machineSpec.machineType", False),
    # A legacy script's label key: refused in the converted definition, whose field path holds the key.
    ("convert-label-key", "script", "--labels", False),
    ("follow", lambda v: ["--follow", v], "--follow: RESOURCE_NAME", False),
    ("report", lambda v: ["report", v], "report: PATH", False),  # not projects/...: a local run's folder
    ("report-resource", lambda v: ["report", f"projects/{v}"], "report: RESOURCE_NAME", False),
    ("serve", lambda v: ["serve", f"/nonexistent/{v}"], "run_job.py serve: error: /nonexistent/", False),
    ("unrecognized", lambda v: [CPU, "--dry-run", v], "unrecognized arguments", False),
    ("convert-var", lambda v: ["convert", LEGACY, "--var", v], "--var", False),
    ("convert-map-bucket", lambda v: ["convert", LEGACY, "--map-bucket", v], "--map-bucket", False),
    ("convert-model", lambda v: ["convert", LEGACY, "--model", v, *DATA], "--model", False),
    ("convert-output", lambda v: ["convert", LEGACY, "-o", v], "-o", False),
    ("convert-delivery", lambda v: ["convert", LEGACY, "--delivery", v], "--delivery", False),
]


def _line(argv, real_outputs: bool, capsys) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    try:
        rc = main(
            [str(a) for a in argv],
            outputs=None if real_outputs else OUTPUTS,
            now=NOW,
            code_hash=CODE_HASH,
            image_hash=IMAGE_HASH,
            out=out,
            err=err,
        )
    except SystemExit as exc:  # argparse's usage errors
        rc = exc.code
    text = err.getvalue() + capsys.readouterr().err  # argparse writes to sys.stderr itself
    assert out.getvalue() == ""
    return rc, text


@pytest.mark.parametrize("kind", list(VALUES))
@pytest.mark.parametrize("argv, names, real", [r[1:] for r in ROWS], ids=[r[0] for r in ROWS])
def test_a_hostile_value_comes_back_in_one_short_line_naming_its_flag(
    argv, names, real, kind, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(REPO_ROOT)  # the job files as a user names them, relative to the checkout

    def args(value):
        if argv == "script":
            # A script file may hold printable text only (the reader refuses the rest with its line), so the
            # value's printable characters stand for it.
            value = "".join(c for c in value if c.isprintable() and not c.isspace()) or BENIGN
            script = tmp_path / f"{len(value)}.sh"
            script.write_text("gcloud ai-platform jobs submit training j --region us-central1 --module-name "
                              f"trainer.task --package-path trainer --labels {shlex.quote(value)}=v\n",
                              encoding="utf-8")
            return ["convert", script, *DATA]
        if argv != "file":
            return argv(value)
        job = tmp_path / f"{len(value)}.yaml"
        job.write_text(CUSTOM.replace("n1-standard-4", json.dumps(value)), encoding="utf-8")
        return [job.relative_to(tmp_path), "--dry-run"]

    if argv == "file":
        monkeypatch.chdir(tmp_path)
    rc, text = _line(args(VALUES[kind]), real, capsys)
    _, benign = _line(args(BENIGN), real, capsys)  # the same refusal for a short value
    assert rc == 2 and "Traceback" not in text
    lines = text.splitlines()
    assert len(lines) == 1 and text.endswith("\n"), text[:500]
    line = lines[0]
    assert line.isprintable(), line[:500]  # no escape sequence, bell or bidi override reaches the terminal
    assert names in line, line[:500]
    assert len(line) <= max(MAX_LINE, len(benign) + VALUE_SHARE), (len(line), line)
    assert len(benign.splitlines()) == 1 and names in benign  # the row tries the refusal it means to
