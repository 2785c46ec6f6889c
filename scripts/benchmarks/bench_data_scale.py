"""Scale benchmark (issue 26): every model's run phases on synthetic data 1x/10x/100x the shipped size, and a
2-worker loopback run's per-worker records read and pre-training time.

    python scripts/benchmarks/bench_data_scale.py                          # everything below, this checkout
    python scripts/benchmarks/bench_data_scale.py --models census,mnist --scales 1,10 --workers off
    python scripts/benchmarks/bench_data_scale.py --repo /tmp/bench-before # the trainer of another checkout
    python scripts/benchmarks/bench_data_scale.py --repo /tmp/bench-before --repo .  # before/after, by run
    python scripts/benchmarks/bench_data_scale.py --models ratings --scales 250 --workers off --max-steps 200
    python scripts/benchmarks/bench_data_scale.py --models census -- --cache-limit-mb 0  # extra trainer flags
    python scripts/benchmarks/bench_data_scale.py --models census --scales 100 --census-files one \
        --max-steps 0 --workers off                                           # a whole epoch: memory figures

Data (scripts/benchmarks/scale_data.py) is generated on the fly, deterministic by --seed, under a temporary
folder that is deleted at the end (--keep DIR keeps the data and the runs' folders there). ``census`` is
``--model wide_deep`` on sampled and perturbed adult.data rows, run from one file and from --files files
(evaluated on adult.test at every scale); ``mnist`` and ``flowers`` are ``--model image_classifier`` on the
shipped training records replicated into shards (MNIST with ``--channels 1``, flowers at ``--image-size 96``
as jobs/image_gpu.yaml; evaluated on the shipped eval files); ``ratings`` is ``--model recommender`` on
synthetic MovieLens-shaped ratings (its own 80/20 split). Default scales: 1,10,100 (census, MNIST: 32,561
and 8,000 records at 1x; ratings: the shipped 100,836, then 1M and 10M), flowers 1,25,250 (80, 2,000 and
20,000 records). Scale 250 of ratings is the issue's 25M (the issue saw 11.2 GB peak at d3ef831: mind
--min-free-gb).

Each run is ``python -m trainer.task`` as a subprocess of checkout --repo (its own ``trainer`` package, cwd
and PYTHONPATH; with several --repo, each run is made on every checkout back to back, so before/after ratios
come from one run of the script), one epoch, at most --max-steps training steps and --max-eval-steps
evaluation steps (only where the data has more: the cap keeps 100x runs bounded and still leaves hundreds of
steady steps; --max-steps 0 runs the whole epoch, which a memory figure needs: a capped census run stops
before its cache has filled, so its peak RSS leaves the cache out). Printed per run: records in --train-files,
the steps run, the phases the trainer writes to metrics.json ("phases": imports, pre-training, first step,
steady examples/s, validation, eval, export, its own peak RSS), pre-training time per record in --train-files
(us/rec), the peak RSS of the process measured from outside (wait4), the SavedModel's size, and two idle gaps
from the log's timestamps: ``fit_tail`` (last epoch line to the start of the final evaluation: fit's end,
where tf.data iterators are torn down; ``fit_tail_cpu`` is the CPU time the process used meanwhile, near 0
when it sat idle) and ``exit_tail`` (the trainer's last log line to process exit). The 1-minute load average
at each run's start is printed with it: figures are noisy by up to 40% on a shared 2-core machine, so compare
ratios from one run of the script.

The loopback (--workers on, default; ``only`` skips the single runs) runs each model's --worker-scale data
(census from its several files, uncapped: one whole epoch) as a chief and a worker of one
MultiWorkerMirroredStrategy cluster over 127.0.0.1 (the pattern of tests/trainer/test_multiworker.py), and
prints per worker its pre-training time (its ``phases:`` log line) and the training records it read in the
epoch: the figure the trainer logs for its shard when it logs one (a line with "per epoch"), else the
training rows of its own data-scan line, which in trainers that do not shard (d3ef831) is all of them on
every worker: auto-sharding DATA reads everything and keeps its share. The ``source`` column says which.

A failed run prints its log's tail and the script goes on; exit status 1 if any run failed, 2 for bad flags.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import scale_data
from bench_runs import REPO, free_ports, trainer_command, trainer_env

DATASETS = ("census", "mnist", "flowers", "ratings")
MODEL = {"census": "wide_deep", "mnist": "image_classifier", "flowers": "image_classifier",
         "ratings": "recommender"}
DEFAULT_SCALES = {"census": (1, 10, 100), "mnist": (1, 10, 100), "flowers": (1, 25, 250),
                  "ratings": (1, 10, 100)}
DEFAULT_WORKER_SCALE = {"census": 10, "mnist": 10, "flowers": 25, "ratings": 10}
# The task's own flags the benchmark runs with.
TASK_FLAGS = {"census": [], "mnist": ["--channels", "1"], "flowers": ["--image-size", "96"], "ratings": []}
EVAL_RECORDS = {"census": 16_281, "mnist": 2_000, "flowers": 50}
# A checkout's default batch sizes (and the recommender's held-out fraction), which its step caps are computed
# from: read from its own trainer.config, as checkouts differ (TensorFlow-free, a fraction of a second).
_DEFAULTS = ("import json, sys; from trainer.config import default_config; c = default_config(sys.argv[1]); "
             "print(json.dumps([c.train_batch_size, c.eval_batch_size, "
             "getattr(c.task, 'eval_fraction', 0)]))")
_LOG = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) (\w+) ([\w.]+): (.*)$")
_SCAN = re.compile(r"^data: train: (\d+) (?:rows|images|ratings)")
# A worker's own line about its share, e.g. "input: worker 0 of 2 reads 162805 of 325610 training records per
# epoch (by file)": the number after "reads", else the first count of records.
_READS = re.compile(r"\breads (\d[\d,]*)|(\d[\d,]*) (?:training )?(?:records|rows|images|ratings|examples)\b")
PHASES = ("imports_s", "pre_training_s", "first_step_s", "steady_examples_per_s", "validation_s", "eval_s",
          "export_s", "peak_rss_mb")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # noqa: D102 - argparse hook: one line, exit 2
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def _numbers(text: str) -> tuple[float, ...]:
    values = tuple(float(v) for v in text.split(","))
    if not values or any(not (v > 0 and math.isfinite(v)) for v in values):
        raise argparse.ArgumentTypeError(f"want positive numbers separated by commas, got {text!r}")
    return values


def _names(text: str) -> tuple[str, ...]:
    names = tuple(text.split(","))
    bad = [n for n in names if n not in DATASETS]
    if bad:
        raise argparse.ArgumentTypeError(f"unknown {', '.join(bad)} (choose from {', '.join(DATASETS)})")
    return names


def _git_label(repo: Path) -> str:
    def git(*args):
        return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True).stdout.strip()

    head = git("rev-parse", "--short", "HEAD") or "unknown"
    return head + ("-dirty" if git("status", "--porcelain", "--untracked-files=no") else "")


def _mem_available_gb() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / (1 << 20)
    return float("nan")


@dataclass
class Proc:
    """One trainer process: its log, exit status, peak RSS (wait4, KiB -> MB) and wall time."""

    log: Path
    started: float
    popen: subprocess.Popen | None = None
    returncode: int | None = None
    peak_rss_mb: float = 0.0
    ended: float = 0.0
    lines: list[tuple[float, str]] = field(default_factory=list)  # (epoch seconds, message)
    cpu: list[tuple[float, float]] = field(default_factory=list)  # (epoch seconds, CPU seconds so far)

    @property
    def wall(self) -> float:
        return self.ended - self.started

    def parse(self) -> None:
        text = self.log.read_text(errors="replace")
        for line in text.splitlines():
            m = _LOG.match(line)
            if m:
                stamp = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
                self.lines.append((stamp, m.group(4)))

    def find(self, prefix: str, last: bool = False) -> tuple[float, str] | None:
        hits = [(t, msg) for t, msg in self.lines if msg.startswith(prefix)]
        return (hits[-1] if last else hits[0]) if hits else None

    def sample_cpu(self) -> None:
        try:
            fields = Path(f"/proc/{self.popen.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return
        # utime and stime (fields 14 and 15 of proc(5); the split above starts at field 3), all threads.
        self.cpu.append((time.time(), (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")))

    def cpu_between(self, start: float, end: float) -> float | None:
        """CPU seconds the process used from ``start`` to ``end`` (sampled every 0.1 s): an idle gap is near
        0, busy work on the 2 cores up to twice its length."""
        before = [c for t, c in self.cpu if t <= start]
        after = [c for t, c in self.cpu if t >= end]
        return round(after[0] - before[-1], 2) if before and after else None

    def tail(self, chars: int = 2500) -> str:
        return self.log.read_text(errors="replace")[-chars:]


def launch(cmd: list[str], repo: Path, log: Path, **env: str) -> Proc:
    # Output to a file, not a pipe: the benchmark reaps the process itself with wait4 (its own peak RSS, not
    # the largest of all children as RUSAGE_CHILDREN gives), and nobody has to drain a pipe meanwhile.
    with open(log, "w") as out:
        popen = subprocess.Popen(cmd, cwd=repo, env=trainer_env(repo, **env), stdout=out,
                                 stderr=subprocess.STDOUT)
    return Proc(log=log, started=time.time(), popen=popen)


def wait_all(procs: list[Proc], timeout: float, min_free_gb: float = 0.0) -> None:
    """Reap every process, recording each one's exit time and peak RSS; all are killed at ``timeout`` s, or
    when the machine's available memory falls below ``min_free_gb`` (it is shared: a run that would push the
    others into the OOM killer is stopped instead, and says so)."""
    deadline = time.time() + timeout
    pending = {p.popen.pid: p for p in procs}
    while pending:
        if pending and min_free_gb and _mem_available_gb() < min_free_gb:
            print(f"  killed: available memory fell below {min_free_gb:g} GB", flush=True)
            for proc in pending.values():
                proc.popen.kill()
            min_free_gb = 0.0
        for pid, proc in list(pending.items()):
            proc.sample_cpu()
            done, status, usage = os.wait4(pid, os.WNOHANG)
            if done:
                proc.ended = time.time()
                proc.returncode = proc.popen.returncode = os.waitstatus_to_exitcode(status)
                proc.peak_rss_mb = usage.ru_maxrss / 1024
                del pending[pid]
        if pending and time.time() > deadline:
            for proc in pending.values():
                proc.popen.kill()
            deadline = float("inf")  # reaped on the next rounds
        time.sleep(0.1)
    for proc in procs:
        proc.parse()


def _dir_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 1e6 if path.is_dir() else 0.0


def _phases_of_log(proc: Proc) -> dict[str, float]:
    hit = proc.find("phases: ", last=True)
    if not hit:
        return {}
    pairs = (item.split("=", 1) for item in hit[1][len("phases: "):].split())
    return {k: float(v) for k, v in pairs}


class Bench:
    def __init__(self, args, root: Path):
        self.args, self.root = args, root
        # (label, checkout): each run is made once per checkout, back to back, so load hits them alike.
        self.repos = [(_git_label(Path(r).resolve()), Path(r).resolve()) for r in args.repo or [str(REPO)]]
        self.rows: list[dict] = []
        self.worker_rows: list[dict] = []
        self.failed = 0
        self._data: dict[tuple[str, float], object] = {}
        self._defaults: dict[tuple[str, Path], tuple[int, int, float]] = {}

    def data(self, name: str, scale: float):
        """The Dataset (census: {files: Dataset}) of ``name`` at ``scale``, generated once."""
        key = (name, scale)
        if key not in self._data:
            start = time.perf_counter()
            folder, seed = self.root / "data", self.args.seed
            folder.mkdir(parents=True, exist_ok=True)
            if name == "census":
                made = scale_data.census(folder, scale, self.args.files, seed)
            elif name == "ratings":
                made = scale_data.ratings(folder, scale, seed)
            else:
                made = getattr(scale_data, name)(folder, int(scale), seed)
            self._data[key] = made
            if scale != 1:
                print(f"  (generated {name} x{scale:g} in {time.perf_counter() - start:.1f} s)", flush=True)
        return self._data[key]

    def defaults(self, name: str, repo: Path) -> tuple[int, int, float]:
        key = (name, repo)
        if key not in self._defaults:
            out = subprocess.run([sys.executable, "-c", _DEFAULTS, MODEL[name]], cwd=repo,
                                 env=trainer_env(repo), capture_output=True, text=True, check=True)
            self._defaults[key] = tuple(json.loads(out.stdout))
        return self._defaults[key]

    def flags(self, name: str, dataset, capped: bool, repo: Path) -> tuple[list[str], int]:
        """Trainer flags for a run of ``dataset`` by checkout ``repo``, and the training steps it will run."""
        train_batch, eval_batch, eval_fraction = self.defaults(name, repo)
        flags = ["--train-files", *dataset.train, "--num-epochs", "1", *TASK_FLAGS[name]]
        if dataset.eval:
            flags += ["--eval-files", *dataset.eval]
        train_records = dataset.records
        if name == "ratings":
            train_records = round(dataset.records * (1 - eval_fraction))
        steps = math.ceil(train_records / train_batch)
        eval_records = (dataset.records - train_records) if name == "ratings" else EVAL_RECORDS[name]
        if capped and self.args.max_steps and steps > self.args.max_steps:
            steps = self.args.max_steps
            flags += ["--steps-per-epoch", str(steps)]
        eval_cap = self.args.max_eval_steps
        if capped and eval_cap and math.ceil(eval_records / eval_batch) > eval_cap:
            flags += ["--eval-steps", str(self.args.max_eval_steps)]
        return flags + self.args.extra, steps

    def single(self, name: str, scale: float) -> None:
        for checkout in self.repos:
            self._single(name, scale, checkout)

    def _single(self, name: str, scale: float, checkout: tuple[str, Path]) -> None:
        made = self.data(name, scale)
        if name == "census":
            variants = [(n, d) for n, d in sorted(made.items())
                        if self.args.census_files == "both" or (n == 1) == (self.args.census_files == "one")]
        else:
            variants = [(made.files, made)]
        for files, dataset in variants:
            label = f"{name}-x{scale:g}-{files}f"
            flags, steps = self.flags(name, dataset, True, checkout[1])
            job = self.root / "runs" / label
            shutil.rmtree(job, ignore_errors=True)
            job.mkdir(parents=True)
            load, free = os.getloadavg()[0], _mem_available_gb()
            proc = launch(trainer_command(MODEL[name], flags, self.args.seed, str(job), "INFO"), checkout[1],
                          job / "trainer.log")
            wait_all([proc], self.args.timeout, self.args.min_free_gb)
            row = {"checkout": checkout[0], "data": name, "scale": f"{scale:g}x", "files": dataset.files,
                   "records": dataset.records, "steps": steps, "load": round(load, 2),
                   "free_gb": round(free, 1), "rc": proc.returncode, "wall_s": round(proc.wall, 1),
                   "rss_mb_wait4": round(proc.peak_rss_mb)}
            metrics = job / "model" / "metrics.json"
            phases = json.loads(metrics.read_text()).get("phases", {}) if metrics.is_file() else {}
            phases = phases or _phases_of_log(proc)
            row.update({k: phases.get(k) for k in PHASES})
            if phases.get("pre_training_s") is not None:
                row["us_per_rec"] = round(phases["pre_training_s"] / dataset.records * 1e6, 2)
            last_epoch, evaluation = proc.find("epoch ", last=True), proc.find("evaluation: ")
            if last_epoch and evaluation and phases.get("eval_s") is not None:
                fit_end = evaluation[0] - phases["eval_s"]
                row["fit_tail_s"] = round(fit_end - last_epoch[0], 2)
                row["fit_tail_cpu_s"] = proc.cpu_between(last_epoch[0], fit_end)
            if proc.lines:
                row["exit_tail_s"] = round(proc.ended - proc.lines[-1][0], 2)
            row["model_mb"] = round(_dir_mb(job / "model"), 1) if metrics.is_file() else None
            self.rows.append(row)
            print(self.format_row(row), flush=True)
            if proc.returncode != 0:
                self.failed += 1
                print(f"  run {label} exited {proc.returncode}; log tail:\n{proc.tail()}", flush=True)
            if not self.args.keep:
                shutil.rmtree(job, ignore_errors=True)

    def loopback(self, name: str) -> None:
        for checkout in self.repos:
            self._loopback(name, checkout)

    def _loopback(self, name: str, checkout: tuple[str, Path]) -> None:
        scale = self.args.worker_scale or DEFAULT_WORKER_SCALE[name]
        made = self.data(name, scale)
        dataset = made[self.args.files] if name == "census" else made
        flags, steps = self.flags(name, dataset, False, checkout[1])
        job = self.root / "runs" / f"{name}-x{scale:g}-loopback"
        shutil.rmtree(job, ignore_errors=True)
        job.mkdir(parents=True)
        chief_port, worker_port = free_ports(2)
        cluster = {"chief": [f"127.0.0.1:{chief_port}"], "worker": [f"127.0.0.1:{worker_port}"]}
        load = os.getloadavg()[0]
        procs = {}
        for task_type in ("chief", "worker"):
            scratch = job / f"tmp-{task_type}"
            scratch.mkdir()
            tf_config = json.dumps({"cluster": cluster, "task": {"type": task_type, "index": 0}})
            cmd = trainer_command(MODEL[name], flags, self.args.seed, str(job / "out"), "INFO")
            procs[task_type] = launch(cmd, checkout[1], job / f"{task_type}.log", TF_CONFIG=tf_config,
                                      TMPDIR=str(scratch))
        wait_all(list(procs.values()), self.args.timeout, self.args.min_free_gb)
        for task_type, proc in procs.items():
            phases = _phases_of_log(proc)
            scan = proc.find("data: ")
            scanned = int(_SCAN.match(scan[1]).group(1)) if scan and _SCAN.match(scan[1]) else None
            own = next((msg for _, msg in proc.lines if "per epoch" in msg and _READS.search(msg)), None)
            if own:
                match = _READS.search(own)
                read, source = int((match.group(1) or match.group(2)).replace(",", "")), "trainer log"
            else:
                read, source = scanned, "scan line"
            row = {"checkout": checkout[0], "data": name, "scale": f"{scale:g}x", "files": dataset.files,
                   "records": dataset.records, "worker": task_type, "rc": proc.returncode,
                   "load": round(load, 2),
                   "pre_training_s": phases.get("pre_training_s"), "read_per_epoch": read, "source": source,
                   "read_fraction": round(read / dataset.records, 3) if read else None,
                   "first_step_s": phases.get("first_step_s"),
                   "steady_examples_per_s": phases.get("steady_examples_per_s"),
                   "peak_rss_mb": phases.get("peak_rss_mb"), "rss_mb_wait4": round(proc.peak_rss_mb),
                   "wall_s": round(proc.wall, 1)}
            self.worker_rows.append(row)
            print(self.format_worker(row), flush=True)
            if own:
                print(f"    {task_type}'s line: {own}", flush=True)
            if proc.returncode != 0:
                self.failed += 1
                print(f"  {task_type} of {name} loopback exited {proc.returncode}; log tail:\n{proc.tail()}",
                      flush=True)
        if not self.args.keep:
            shutil.rmtree(job, ignore_errors=True)

    @staticmethod
    def _cells(row: dict, keys) -> list[str]:
        def cell(v):
            if v is None:
                return "-"
            if isinstance(v, float):
                return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:g}"
            return f"{v:,}" if isinstance(v, int) and not isinstance(v, bool) else str(v)
        return [cell(row.get(k)) for k in keys]

    SINGLE = ("checkout", "data", "scale", "files", "records", "steps", "imports_s", "pre_training_s",
              "us_per_rec", "first_step_s", "steady_examples_per_s", "validation_s", "eval_s", "export_s",
              "peak_rss_mb", "rss_mb_wait4", "fit_tail_s", "fit_tail_cpu_s", "exit_tail_s", "model_mb",
              "wall_s", "load", "free_gb", "rc")
    WORKER = ("checkout", "data", "scale", "files", "records", "worker", "pre_training_s", "read_per_epoch",
              "read_fraction", "source", "first_step_s", "steady_examples_per_s", "peak_rss_mb",
              "rss_mb_wait4", "wall_s", "load", "rc")

    def format_row(self, row: dict) -> str:
        return "  ".join(f"{k}={v}" for k, v in zip(self.SINGLE, self._cells(row, self.SINGLE), strict=True))

    def format_worker(self, row: dict) -> str:
        return "  ".join(f"{k}={v}" for k, v in zip(self.WORKER, self._cells(row, self.WORKER), strict=True))

    def markdown(self) -> str:
        out = []
        for keys, rows in ((self.SINGLE, self.rows), (self.WORKER, self.worker_rows)):
            if rows:
                out += ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
                out += ["| " + " | ".join(self._cells(r, keys)) + " |" for r in rows]
                out.append("")
        return "\n".join(out)


def main(argv=None) -> int:
    p = _Parser(description=__doc__.splitlines()[0])
    p.add_argument("--models", type=_names, default=DATASETS, metavar="LIST",
                   help=f"datasets, comma-separated (default {','.join(DATASETS)})")
    p.add_argument("--scales", type=_numbers, default=None, metavar="LIST",
                   help="scales, comma-separated (default: census/mnist/ratings 1,10,100, flowers 1,25,250)")
    p.add_argument("--files", type=int, default=8,
                   help="census: files of the several-files variant (default 8)")
    p.add_argument("--census-files", choices=("both", "one", "several"), default="both",
                   help="census single runs: from one file, from --files files, or both (default)")
    p.add_argument("--workers", choices=("on", "off", "only"), default="on",
                   help="the 2-worker loopback runs: also (on), none, or only those")
    p.add_argument("--worker-scale", type=_numbers, default=None, metavar="SCALE",
                   help="scale of the loopback runs (default: census/mnist/ratings 10, flowers 25)")
    p.add_argument("--max-steps", type=int, default=300, help="cap training steps per run (0: none)")
    p.add_argument("--max-eval-steps", type=int, default=100, help="cap evaluation steps per run (0: none)")
    p.add_argument("--repo", action="append", metavar="DIR",
                   help="checkout whose trainer runs (default: this one); repeat it to run each model and "
                        "scale on every checkout back to back")
    p.add_argument("--keep", default=None, metavar="DIR",
                   help="generate data and run folders into DIR and keep them")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--timeout", type=float, default=1800, help="seconds before a run is killed")
    p.add_argument("--min-free-gb", type=float, default=2.0, metavar="GB",
                   help="kill a run when the machine's available memory falls below GB (default 2; 0: never)")
    p.add_argument("extra", nargs="*", help="more trainer flags, after --")
    args = p.parse_args(argv)
    if args.files < 2:
        p.error(f"argument --files: must be at least 2 (sharding by file needs several), got {args.files}")
    if args.max_steps < 0 or args.max_eval_steps < 0:
        p.error("argument --max-steps/--max-eval-steps: must be >= 0")
    if args.worker_scale is not None:
        if len(args.worker_scale) != 1:
            p.error("argument --worker-scale: one scale")
        args.worker_scale = args.worker_scale[0]
    image_scales = [s for name in args.models if name in ("mnist", "flowers")
                    for s in ([args.worker_scale] if args.worker_scale else []) + list(args.scales or ())]
    if any(s != int(s) for s in image_scales):
        p.error("argument --scales: MNIST and flowers replicate records: whole numbers only")
    for repo in args.repo or []:
        if not (Path(repo) / "trainer" / "task.py").is_file():
            p.error(f"argument --repo: no trainer/task.py in {repo}")

    if args.keep:
        Path(args.keep).mkdir(parents=True, exist_ok=True)
        root = Path(args.keep)
    else:
        root = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    bench = Bench(args, root)
    checkouts = ", ".join(f"{path} at {label}" for label, path in bench.repos)
    print(f"# checkout {checkouts}; {os.cpu_count()} CPUs, "
          f"{_mem_available_gb():.1f} GB available, load {' '.join(f'{x:.2f}' for x in os.getloadavg())}, "
          f"{datetime.now().astimezone():%Y-%m-%d %H:%M %Z}; data under {root}", flush=True)
    try:
        if args.workers != "only":
            for name in args.models:
                for scale in args.scales or DEFAULT_SCALES[name]:
                    bench.single(name, scale)
        if args.workers != "off":
            for name in args.models:
                bench.loopback(name)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    print(f"# done; load {' '.join(f'{x:.2f}' for x in os.getloadavg())}\n")
    print(bench.markdown())
    return 1 if bench.failed else 0


if __name__ == "__main__":
    sys.exit(main())
