"""Hostile input through every door besides training data, as an attacker or a careless user would try it:
job files and --set values (`run_job.py FILE --dry-run`), legacy configs and submit scripts (`run_job.py
convert`), environment configs and outputs files (`run_job.py JOB --env dev --dry-run` and `scripts/synth.py`
with INFRA_ENVIRONMENTS_DIR). Each attempt must end with exactly one line on stderr naming the file, exit
status 2, no traceback, nothing on stdout and nothing written, within ``MAX_CPU_S`` of CPU time (and
``MAX_WALL_S`` of wall time) and at most ``RSS_BUDGET_KB`` of peak RSS above a valid run of the same tool
(issue 30's targets: 10 s, 1 GB).

All attempts run in one subprocess (tests/scripts/measured_runs.py forks a child per attempt from a warm
interpreter and reads each child's peak RSS from wait4), so the table costs seconds, not one interpreter each.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.helpers import subprocess_env
from tests.jobs.helpers import CUSTOM, JOBS_DIR, REPO_ROOT

RUN_JOB = str(REPO_ROOT / "scripts" / "run_job.py")
SYNTH = str(REPO_ROOT / "scripts" / "synth.py")
CPU_JOB = str(JOBS_DIR / "census_cpu.yaml")
# The test's own environment (a user's infra/environments must not change what it tries): every door reads it.
DEV = """\
project_id: acme-ml-dev
project_number: "123456789012"
region: us-central1
name_prefix: acme-ml-dev
state_bucket: acme-ml-dev-tfstate
github:
  owner: acme
  repository: vertex-tf-platform
  repository_id: 123456789
labels:
  team: ml-platform
schedules:
  recommender-daily:
    job: jobs/recommender.yaml
    cron: "0 3 * * *"
    set: {}
alerts: {email: ml@acme.example}
"""
# The 10 s is what an attempt may cost: its CPU time, which other work on a shared machine does not
# inflate (a 1 MB script took 2.7 s of CPU and 21 s of wall time at load 13). The wall-time bound still
# catches an attempt that waits instead of working (a read that blocks), below the children's hard limit.
MAX_CPU_S = 10
MAX_WALL_S = 45
RSS_BUDGET_KB = 512 * 1024  # half the 1 GB: the worst attempt here uses about a tenth of it
SUBMIT = (
    "gcloud ai-platform jobs submit training census --region us-central1 --module-name trainer.task "
    "--package-path trainer/ --scale-tier BASIC"
)
DATA = " -- --train-files=gs://acme-ml-dev-data/a.csv --eval-files=gs://acme-ml-dev-data/b.csv\n"


def _file(name: str, text: str) -> Callable[[Path], str]:
    def make(tmp: Path) -> str:
        (tmp / name).write_text(text, encoding="utf-8")
        return str(tmp / name)

    return make


def _fifo(name: str) -> Callable[[Path], str]:
    def make(tmp: Path) -> str:
        os.mkfifo(tmp / name)
        return str(tmp / name)

    return make


def _link(name: str, target: str) -> Callable[[Path], str]:
    def make(tmp: Path) -> str:
        (tmp / name).symlink_to(target)
        return str(tmp / name)

    return make


def _sparse(name: str, size: int) -> Callable[[Path], str]:
    def make(tmp: Path) -> str:
        with open(tmp / name, "w", encoding="utf-8") as handle:
            handle.write(DEV)
            handle.truncate(size)  # a hole, not 300 MB on the disk
        return str(tmp / name)

    return make


def _dev(old: str, new: str) -> str:
    assert old in DEV
    return DEV.replace(old, new)


def _alias_bomb(levels: int) -> str:
    """[&a0 [x]*10, &a1 [*a0]*10, ...]: 10**levels values from a few hundred bytes."""
    return (
        "[&a0 [x,x,x,x,x,x,x,x,x,x], "
        + ", ".join(f"&a{i} [" + ",".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, levels))
        + "]"
    )


HEAD = DEV[: DEV.index("schedules:")]
SCRIPT = "#!/bin/sh\n"


# Doors: each builds (script, args, env) from the file the row's maker wrote.
def _job_door(*extra: str):
    return lambda file, tmp: (RUN_JOB, [file, "--dry-run", *extra], {})


def _convert_door(*extra: str):
    return lambda file, tmp: (RUN_JOB, ["convert", file, *extra], {})


def _env_door(script: str = RUN_JOB):
    def door(file, tmp):
        env = {"INFRA_ENVIRONMENTS_DIR": str(Path(file).parent), "CDKTF_OUTDIR": str(tmp / "cdktf.out")}
        args = [CPU_JOB, "--env", "dev", "--dry-run"] if script == RUN_JOB else ["dev"]
        return script, args, env

    return door


def _outputs_door(file, tmp):
    return RUN_JOB, [CPU_JOB, "--dry-run", "--outputs-file", file], {}


def _set_door(value: str):
    return lambda file, tmp: (RUN_JOB, [CPU_JOB, "--dry-run", "--set", value], {})


def _convert_to_link(file, tmp):
    (tmp / "out.yaml").symlink_to(tmp / "elsewhere.yaml")
    return RUN_JOB, ["convert", file, "-o", str(tmp / "out.yaml"), *DATA.split()], {}


# app=$L$L$L is just under the shell's 1 MiB word cap and, alone, over the definition's 1 MiB file cap (the
# 200 KB module is shortened wherever the conversion repeats it).
LABELS = (
    SCRIPT
    + "L="
    + "a" * 349_500
    + "\nM="
    + "m" * 200_000
    + "\n"
    + SUBMIT.replace("--module-name trainer.task", "--module-name trainer.$M --labels app=$L$L$L")
    + DATA
)

# id, door, input maker, fragment of the one line, exit status
HOSTILE = [
    # job files and --set values: run_job.py FILE --dry-run
    (
        "job-nul",
        _job_door(),
        _file("job.yaml", CUSTOM + "# \0\n"),
        f"line {CUSTOM.count(chr(10)) + 1}: contains the control character U+0000",
        2,
    ),
    ("job-escape", _job_door(), _file("job.yaml", "kind: Custom\x1bJob\n"), "U+001B", 2),
    (
        "job-bad-tag",
        _job_door(),
        _file("job.yaml", "kind: CustomJob\nmaxTrialCount: !!int abc\n"),
        "does not fit its YAML tag",
        2,
    ),
    (
        "job-5000-digits",
        _job_door(),
        _file("job.yaml", "kind: CustomJob\nmaxTrialCount: " + "9" * 5000 + "\n"),
        "maxTrialCount: a number of 5000 characters",
        2,
    ),
    (
        "set-control",
        _set_door("displayName=a\x01"),
        _file("unused", ""),
        "--set displayName: contains the control character U+0001",
        2,
    ),
    ("set-5000-digits", _set_door("displayName=" + "9" * 5000), _file("unused", ""), "a number of 5000", 2),
    # legacy configs and scripts: run_job.py convert FILE
    (
        "shell-doubling-chain",
        _convert_door(),
        _file(
            "train.sh",
            SCRIPT
            + "A0=xxxxxxxxxxxxxxxx\n"
            + "".join(f"A{i + 1}=$A{i}$A{i}\n" for i in range(60))
            + SUBMIT
            + DATA,
        ),
        "line 18: a word that expands to more than 1048576 characters",
        2,
    ),
    (
        "shell-1MB-continuations",
        _convert_door(),
        _file("train.sh", SCRIPT + "x \\\n" * 250_000 + SUBMIT + DATA),
        "no `gcloud ai-platform jobs submit training` command",
        2,
    ),
    (
        "shell-1000-nested-defaults",
        _convert_door(),
        _file("train.sh", SCRIPT + "B=" + "${A:-" * 1000 + "x" + "}" * 1000 + "\n" + SUBMIT + DATA),
        "defaults nested more than 32 deep",
        2,
    ),
    (
        "shell-2000-nested-ifs",
        _convert_door(),
        _file("train.sh", SCRIPT + "if x; then\n" * 2000 + "A=1\n" + "fi\n" * 2000 + SUBMIT + DATA),
        "line 34: if/case/loops/functions nested more than 32 deep",
        2,
    ),
    (
        "shell-50000-case-branches",
        _convert_door(),
        _file(
            "train.sh",
            SCRIPT
            + "case $x in\n"
            + "".join(f"p{i}) V{i}=1;;\n" for i in range(50_000))
            + "esac\n"
            + SUBMIT
            + " --bogus"
            + DATA,
        ),
        "--bogus: not a flag",
        2,
    ),
    (
        "shell-100000-assignments",
        _convert_door(),
        _file(
            "train.sh",
            SCRIPT + " ".join(f"A{i}=1" for i in range(100_000)) + " true\n" + SUBMIT + " --bogus" + DATA,
        ),
        "--bogus: not a flag",
        2,
    ),
    (
        "shell-nul",
        _convert_door(),
        _file("train.sh", SCRIPT + "A=\0\n" + SUBMIT + DATA),
        "line 2: contains the control character U+0000",
        2,
    ),
    (
        "shell-5000-digit-count",
        _convert_door(),
        _file("train.sh", SCRIPT + SUBMIT + " --worker-count " + "9" * 5000 + DATA),
        "--worker-count: '99",
        2,
    ),
    (
        "shell-label-too-long",
        _convert_door(),
        _file("train.sh", LABELS),
        "--labels: the converted definition would be",
        2,
    ),
    (
        "shell-unterminated-heredoc",
        _convert_door(),
        _file("train.sh", SCRIPT + "cat <<EOF\n" + "x\n" * 400_000 + SUBMIT + DATA),
        "line 2: the here-document <<EOF is never closed",
        2,
    ),
    (
        "shell-100000-heredocs-on-one-line",
        _convert_door(),
        _file(
            "train.sh",
            SCRIPT + "cat" + " <<A" * 100_000 + "\n" + "A\n" * 100_000 + SUBMIT + " --bogus" + DATA,
        ),
        "--bogus: not a flag",
        2,
    ),
    (
        "shell-40000-unclosed-arithmetic-fors",
        _convert_door(),
        _file("train.sh", SCRIPT + "for ((;done;" * 40_000 + "\n" + SUBMIT + " --bogus" + DATA),
        "--bogus: not a flag",
        2,
    ),
    (
        "shell-arithmetic-unclosed-brackets",
        _convert_door(),
        _file("train.sh", SCRIPT + "(( " + "a[" * 300_000 + " ))\n" + SUBMIT + " --bogus" + DATA),
        "--bogus: not a flag",
        2,
    ),
    (
        "shell-10000-sources-and-calls",
        _convert_door(),
        _file(
            "train.sh",
            SCRIPT
            + "f() { "
            + " ".join(f"V{i}=1;" for i in range(3000))
            + " }\n"
            + "A=1\n. ./x.sh\nf\n" * 10_000
            + SUBMIT
            + " --bogus"
            + DATA,
        ),
        "--bogus: not a flag",
        2,
    ),
    ("shell-fifo", _convert_door(), _fifo("train.sh"), "not a regular file (a FIFO)", 2),
    (
        "json-3000-deep",
        _convert_door(),
        _file("job.json", '{"trainingInput": ' + "[" * 3000 + "]" * 3000 + "}"),
        "(parse): nested too deep to parse",
        2,
    ),
    (
        "json-5000-digits",
        _convert_door(),
        _file("job.json", '{"trainingInput": {"workerCount": ' + "9" * 5000 + "}}"),
        "a number of 5000 characters",
        2,
    ),
    (
        "config-control-char",
        _convert_door(),
        _file("config.yaml", "trainingInput:\n  scaleTier: BA\x07SIC\n"),
        "line 2: contains the control character U+0007",
        2,
    ),
    (
        "convert-o-symlink",
        _convert_to_link,
        _file("config.yaml", "trainingInput: {scaleTier: BASIC}\n"),
        "-o: is a symbolic link",
        2,
    ),
    # environment configs: run_job.py JOB --env dev --dry-run, and the CDK app
    (
        "env-alias-bomb-in-set",
        _env_door(),
        _file(
            "dev.yaml",
            HEAD + "schedules:\n  nightly:\n    job: "
            "jobs/recommender.yaml\n    cron: '0 3 * * *'\n    set:\n      displayName: "
            + _alias_bomb(10)
            + "\n",
        ),
        "expands to more than 50000 values",
        2,
    ),
    (
        "env-100000-schedules",
        _env_door(),
        _file("dev.yaml", HEAD + "schedules: {" + ",".join(f"s{i}" for i in range(100_000)) + "}\n"),
        "schedules: more than 100 schedules (line 12); allowed: at most 100",
        2,
    ),
    (
        "env-5000-deep",
        _env_door(),
        _file("dev.yaml", HEAD + "labels: " + "[" * 5000 + "]" * 5000 + "\n"),
        "nested too deep to parse",
        2,
    ),
    (
        "env-300MB",
        _env_door(),
        _sparse("dev.yaml", 300_000_000),
        "300000000 bytes; allowed: at most 1048576",
        2,
    ),
    ("env-fifo", _env_door(), _fifo("dev.yaml"), "not a regular file (a FIFO)", 2),
    ("env-proc-environ", _env_door(), _link("dev.yaml", "/proc/self/environ"), "control character U+0000", 2),
    ("env-nul", _env_door(), _file("dev.yaml", DEV + "\0"), "control character U+0000", 2),
    (
        "env-project-id-newline",
        _env_door(),
        _file("dev.yaml", _dev("project_id: acme-ml-dev\n", 'project_id: "acme-ml-dev\\n"\n')),
        "project_id: got 'acme-ml-dev\\n'",
        2,
    ),
    (
        "env-schedule-name-newline",
        _env_door(),
        _file("dev.yaml", _dev("  recommender-daily:", '  "recommender-daily\\n":')),
        "allowed: 2-30 lowercase letters",
        2,
    ),
    (
        "env-label-newline",
        _env_door(),
        _file("dev.yaml", _dev("team: ml-platform", 'team: "ml\\n"')),
        "labels.team: got 'ml\\n'",
        2,
    ),
    (
        "env-5000-digit-id",
        _env_door(),
        _file("dev.yaml", _dev("repository_id: 123456789\n", "repository_id: " + "1" * 5000 + "\n")),
        "github.repository_id: a number of 5000 characters",
        2,
    ),
    (
        "env-cron-5000-digit-step",
        _env_door(),
        _file("dev.yaml", _dev('"0 3 * * *"', '"*/' + "9" * 5000 + ' 3 * * *"')),
        "has 5000 digits; allowed: at most 59",
        2,
    ),
    (
        "env-set-date",
        _env_door(),
        _file("dev.yaml", _dev("set: {}", "set: {displayName: 2024-01-01}")),
        "set.displayName: got datetime.date(2024, 1, 1)",
        2,
    ),
    (
        "synth-100000-schedules",
        _env_door(SYNTH),
        _file("dev.yaml", HEAD + "schedules: {" + ",".join(f"s{i}" for i in range(100_000)) + "}\n"),
        "field 'schedules': more than 100 schedules",
        2,
    ),
    (
        "synth-project-id-newline",
        _env_door(SYNTH),
        _file("dev.yaml", _dev("project_id: acme-ml-dev\n", 'project_id: "acme-ml-dev\\n"\n')),
        "field 'project_id': got 'acme-ml-dev\\n'",
        2,
    ),
    (
        "outputs-3000-deep",
        _outputs_door,
        _file("dev.json", '{"dev": ' + "[" * 3000 + "]" * 3000 + "}"),
        "nested too deep to parse",
        2,
    ),
]

# A valid run of each tool: the baseline peak RSS the budget is counted from.
BASELINES = {
    RUN_JOB: ([CPU_JOB, "--dry-run"], {}),
}


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """{row id: (result, stdout, stderr, input folder)} for every row, plus the baseline, from one run."""
    root = tmp_path_factory.mktemp("hostile-doors")
    attempts, folders = [], {}
    environments = root / "environments"
    environments.mkdir()
    (environments / "dev.yaml").write_text(DEV, encoding="utf-8")
    every = {"INFRA_ENVIRONMENTS_DIR": str(environments)}  # the env doors name their own folder instead
    for id_, door, make, _, _ in HOSTILE:
        folder = root / id_
        folder.mkdir()
        script, args, env = door(make(folder), folder)
        folders[id_] = folder
        attempts.append(
            {
                "script": script,
                "args": args,
                "env": {**every, **env},
                "out": str(root / f"{id_}.out"),
                "err": str(root / f"{id_}.err"),
            }
        )
    attempts.append(
        {
            "script": RUN_JOB,
            "args": BASELINES[RUN_JOB][0],
            "env": every,
            "out": str(root / "baseline.out"),
            "err": str(root / "baseline.err"),
        }
    )
    before = sorted(p.name for p in REPO_ROOT.iterdir())
    proc = subprocess.run(
        [sys.executable, "-m", "tests.scripts.measured_runs"],
        input=json.dumps(attempts),
        cwd=REPO_ROOT,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in REPO_ROOT.iterdir()) == before  # nothing written into the checkout
    results = json.loads(proc.stdout)
    baseline = results.pop()
    assert baseline["status"] == 0, (root / "baseline.err").read_text()
    return {
        attempt_id: (
            result,
            Path(a["out"]).read_text(errors="replace"),
            Path(a["err"]).read_text(errors="replace"),
            folders[attempt_id],
            baseline,
        )
        for (attempt_id, *_), a, result in zip(HOSTILE, attempts[:-1], results, strict=True)
    }


@pytest.mark.parametrize(
    "attempt_id, fragment, status", [(h[0], h[3], h[4]) for h in HOSTILE], ids=[h[0] for h in HOSTILE]
)
def test_hostile_input_is_one_line_exit_2_in_bounded_time_and_memory(measured, attempt_id, fragment, status):
    result, out, err, folder, baseline = measured[attempt_id]
    assert "Traceback" not in err, err[-3000:]
    assert result["status"] == status, err[-3000:]  # a signal death is negative
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1, err[-3000:]
    assert fragment in lines[0], lines[0][:500]
    assert str(folder) in lines[0] or "--set" in lines[0], lines[0][:500]  # names the file (or the flag)
    assert "allowed: " in lines[0]
    assert result["cpu_s"] <= MAX_CPU_S and result["wall_s"] <= MAX_WALL_S, result
    assert result["maxrss_kb"] - baseline["maxrss_kb"] <= RSS_BUDGET_KB, (result, baseline)
    # Nothing written: the -o target is not created, the CDK app synthesized nothing.
    assert not (folder / "elsewhere.yaml").exists() and not (folder / "out.yaml").is_file()
    assert not (folder / "cdktf.out").exists()
