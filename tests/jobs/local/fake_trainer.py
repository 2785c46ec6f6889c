"""A stand-in trainer for the local executor's tests.

    python -m tests.jobs.local.fake_trainer --dump-dir=DIR [--x=0.3 --n=3 --c=b ...]

It records what the replica received (argv, the Vertex runtime contract variables, cwd, pid) in
``DIR/<trial>-<pool>-<index>.json`` and reports a deterministic metric of its ``--x``, ``--n`` and ``--c``
flags through cloudml-hypertune, as the real trainer does (its chief always reports). Flags for the test:
  --sleep=S           sleep S seconds before reporting (parallelism benchmark)
  --hold=PATH         trials other than 1 wait while PATH exists (SIGINT tests)
  --fail-trials=1,3   exit 1 in those trials; --fail=1 always exits 1 (after --sleep)
  --steps=K           report K measurements; the middle one is the best, the last is 0.1 lower
  --connect=1         workers connect to the chief's CLUSTER_SPEC address, the chief accepts (real ports)
  --metric=TAG        the reported metric's tag (default score)
  --on-sigterm=exit|ignore  a preemption test: exit 143 on SIGTERM (as trainer.task does) or ignore it (only
                      SIGKILL ends it); each attempt records itself (<name>.json, then <name>.2.json, ...)
  --sleep-first=S     with --on-sigterm: the first attempt sleeps S seconds (waiting to be preempted)
  --epochs=K --backup=B  with --on-sigterm: the first attempt logs K epoch lines as trainer.task does and
                      leaves a BackupAndRestore record of B epochs in AIP_CHECKPOINT_DIR
  --replay=PATH       print PATH's lines to stderr (a real trainer's log, its progress lines among them)
  --metrics=PATH      the chief copies PATH to AIP_MODEL_DIR/metrics.json, as the real trainer writes it
"""

import json
import os
import signal
import socket
import sys
import time

CONTRACT = (
    "AIP_MODEL_DIR",
    "AIP_CHECKPOINT_DIR",
    "AIP_TENSORBOARD_LOG_DIR",
    "CLUSTER_SPEC",
    "TF_CONFIG",
    "CLOUD_ML_TRIAL_ID",
    "CLOUD_ML_HP_METRIC_FILE",
    "CLOUD_ML_JOB_ID",
    "CUDA_VISIBLE_DEVICES",
    "TRAINER_CPU_FALLBACK",
    "TRAINER_CPU_REPLICAS",
    "PYTHONPATH",
    "TF_NUM_INTRAOP_THREADS",
    "TF_NUM_INTEROP_THREADS",
    "OMP_NUM_THREADS",
    "EXTRA_VAR",
)


def parse(argv):
    flags = {}
    for arg in argv:
        if arg.startswith("--") and "=" in arg:
            key, value = arg[2:].split("=", 1)
            flags[key.replace("-", "_")] = value
    return flags


def objective(flags):
    x = float(flags.get("x", 0.5))
    n = int(flags.get("n", 3))
    bonus = {"a": 0.0, "b": 0.05, "c": 0.02}.get(flags.get("c", "a"), 0.0)
    return round(1.0 - (x - 0.3) ** 2 - 0.01 * (n - 3) ** 2 + bonus, 6)


def rendezvous(spec, task):
    chief = spec["cluster"]["workerpool0"][0]
    host, port = chief.rsplit(":", 1)
    if task["type"] == "workerpool0":
        server = socket.create_server((host, int(port)))
        server.settimeout(60)
        heard = []
        for _ in range(sum(len(v) for k, v in spec["cluster"].items() if k != "workerpool0")):
            conn, _ = server.accept()
            heard.append(conn.recv(64).decode())
            conn.close()
        return sorted(heard)
    deadline = time.time() + 60
    while True:
        try:
            with socket.create_connection((host, int(port)), timeout=5) as conn:
                conn.sendall(f"hello from {task['type']}-{task['index']}".encode())
                return "sent"
        except OSError:
            if time.time() > deadline:
                raise
            time.sleep(0.1)


def record_file(name, attempt):
    return f"{name}.json" if attempt == 1 else f"{name}.{attempt}.json"


def main():
    flags = parse(sys.argv[1:])
    dump_dir = flags["dump_dir"]
    os.makedirs(dump_dir, exist_ok=True)
    trial = os.environ.get("CLOUD_ML_TRIAL_ID", "job")
    spec = json.loads(os.environ["CLUSTER_SPEC"]) if "CLUSTER_SPEC" in os.environ else None
    task = spec["task"] if spec else {"type": "workerpool0", "index": 0}
    name = f"{trial}-{task['type']}-{task['index']}"
    record = {
        "argv": sys.argv[1:],
        "env": {k: os.environ[k] for k in CONTRACT if k in os.environ},
        "cwd": os.getcwd(),
        "pid": os.getpid(),
        "data_exists": os.path.exists(flags["data"]) if "data" in flags else None,
    }
    attempt = 1
    if flags.get("on_sigterm"):
        while os.path.exists(os.path.join(dump_dir, record_file(name, attempt))):
            attempt += 1
        if flags["on_sigterm"] == "ignore":
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        else:
            signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    with open(os.path.join(dump_dir, record_file(name, attempt)), "w") as f:
        json.dump(record, f)
    if attempt == 1 and "epochs" in flags:
        for epoch in range(1, int(flags["epochs"]) + 1):
            print(f"INFO trainer: epoch {epoch}/9 loss=0.5000 (0.1 s)", flush=True)
        with open(os.path.join(os.environ["AIP_CHECKPOINT_DIR"], "training_metadata.json"), "w") as f:
            json.dump({"epoch": int(flags["backup"])}, f)
    if attempt == 1 and "sleep_first" in flags:
        time.sleep(float(flags["sleep_first"]))
    if spec and flags.get("connect") == "1":
        record["rendezvous"] = rendezvous(spec, task)
        with open(os.path.join(dump_dir, name + ".json"), "w") as f:
            json.dump(record, f)
    if "replay" in flags:
        with open(flags["replay"]) as f:
            sys.stderr.write(f.read())
        sys.stderr.flush()
    time.sleep(float(flags.get("sleep", 0)))
    hold = flags.get("hold")
    while hold and trial != "1" and os.path.exists(hold):
        time.sleep(0.05)
    if flags.get("fail") == "1" or trial in flags.get("fail_trials", "").split(","):
        print("fake trainer: failing on purpose", file=sys.stderr)
        sys.exit(1)
    if task["type"] == "workerpool0":
        # As trainer.task does: the chief always reports, and cloudml-hypertune writes to
        # $CLOUD_ML_HP_METRIC_FILE, or to its shared default /tmp/hypertune/output.metrics when that is unset.
        import hypertune

        value = objective(flags)
        steps = int(flags.get("steps", 1))
        reporter = hypertune.HyperTune()
        for step in range(1, steps + 1):
            reported = value if steps == 1 or step == (steps + 1) // 2 else value - 0.1 * (step / steps)
            reporter.report_hyperparameter_tuning_metric(
                hyperparameter_metric_tag=flags.get("metric", "score"),
                metric_value=reported,
                global_step=step,
            )
    model_dir = os.environ.get("AIP_MODEL_DIR")
    if model_dir and task["type"] == "workerpool0":
        os.makedirs(model_dir, exist_ok=True)
        with open(os.path.join(model_dir, "saved_model.pb"), "w") as f:
            f.write("fake")
        if "metrics" in flags:
            with open(flags["metrics"]) as src, open(os.path.join(model_dir, "metrics.json"), "w") as f:
                f.write(src.read())


if __name__ == "__main__":
    main()
