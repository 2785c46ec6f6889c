"""`run_job.py --help` is one screen (the common use, the verbs, where the rest is); `--help-all` and each
verb's `--help` still document every option, and none of them imports TensorFlow."""

from __future__ import annotations

import re

import pytest

from jobs.cli import convert, report, run_job, runs, serve
from jobs.definition.gcloud_flags import FLAGS
from tests.jobs.helpers import run_cli
from tests.scripts.test_run_job import heavy_modules, probe

MAX_HELP_LINES = 35
# The options each command had when --help was cut to one screen: none may go missing from its help (the
# parsers' own options are checked too, so a new one is covered without being listed here).
OPTIONS = {
    "": [
        "--env", "--outputs-file", "--set", "--dry-run", "--local", "--follow", "--no-wait", "--no-logs",
        "--report-dir", "--region", "--resume", "--strict-accelerators", "--local-root",
        *(f.flag for f in FLAGS),
    ],
    "convert": [
        "-o", "--output", "--force", "--strict", "--env", "--outputs-file", "--model", "--delivery",
        "--map-bucket", "--var",
    ],
    "report": ["--report-dir"],
    "serve": ["--port", "--host"],
    "runs": ["--local", "--env", "--local-root", "--compare"],
}
PARSERS = {
    "": run_job.build_parser,
    "convert": convert.build_parser,
    "report": report.build_parser,
    "serve": serve.build_parser,
    "runs": runs.build_parser,
}


def test_help_is_one_screen_of_the_common_use(script_env):
    result = probe(["--help"], script_env)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) <= MAX_HELP_LINES, result.stdout
    assert lines[0].startswith("usage: run_job.py JOB_FILE")
    for verb in run_job.VERBS:
        assert any(line.lstrip().startswith(f"{verb} ") for line in lines), verb  # each verb, with a line
    for pointer in ("run_job.py --help-all", "run_job.py VERB --help"):
        assert pointer in result.stdout
    assert "python scripts/run_job.py jobs/census_cpu.yaml --dry-run" in result.stdout
    assert "--strict-accelerators" not in result.stdout  # the rest is behind --help-all
    assert heavy_modules(result.stderr) == ""


@pytest.mark.parametrize(
    "argv",
    [["--help-all"], ["jobs/census_cpu.yaml", "--help"], ["convert", "--help"], ["report", "--help"],
     ["serve", "--help"], ["runs", "--help"]],
    ids=["help-all", "job-file-help", "convert", "report", "serve", "runs"],
)
def test_each_help_works_without_tensorflow(argv, script_env):
    result = probe(argv, script_env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: run_job.py")
    if argv == ["--help-all"]:
        assert "Submitting is idempotent" in result.stdout  # the whole description, not only the examples
    assert heavy_modules(result.stderr) == ""


@pytest.mark.parametrize("verb", list(OPTIONS), ids=[v or "job-file" for v in OPTIONS])
def test_every_option_is_documented_in_its_commands_help(verb, capsys):
    argv = [verb, "--help"] if verb else ["--help-all"]
    rc, out, err = run_cli(argv)
    assert rc == 0, err
    shown = capsys.readouterr().out
    parsed = [o for a in PARSERS[verb]()._actions for o in a.option_strings]
    documented = set(re.findall(r"(?<![\w-])(--?[a-z][\w-]*)", shown))
    missing = sorted({*OPTIONS[verb], *parsed} - documented)
    assert missing == [], shown


def test_the_short_help_is_the_same_for_a_job_file(capsys):
    assert run_cli(["--help"])[0] == 0
    alone = capsys.readouterr().out
    assert run_cli(["jobs/census_cpu.yaml", "-h"])[0] == 0
    assert capsys.readouterr().out == alone
