"""Run command-line attempts, each in a forked child of one warm process, and measure them.

    python -m tests.scripts.measured_runs < attempts.json > results.json

An attempt is {"script": path, "args": [...], "env": {...}, "out": path, "err": path}; its result is
{"status": exit status or -signal, "wall_s": seconds, "cpu_s": the child's user + system CPU seconds,
"maxrss_kb": the child's peak RSS (wait4's rusage)}.
The tools' modules are imported once before the first fork, so each child starts at the same baseline and
its peak RSS minus the baseline run's is what the attempt itself cost; forking instead of starting one
interpreter per attempt keeps a table of dozens of attempts to a few seconds. Each child runs the script
as `python script ...` would (runpy, as __main__), stops at SIGALRM after ``HARD_LIMIT_S`` and cannot map
more than ``ADDRESS_SPACE`` bytes, so a regression fails its row instead of stalling the machine.
"""

from __future__ import annotations

import json
import os
import resource
import runpy
import signal
import sys
import time
import traceback

HARD_LIMIT_S = 60
ADDRESS_SPACE = 6 << 30


def main() -> None:
    attempts = json.load(sys.stdin)
    # What the scripts import on their way to a refusal: loaded once, shared by every child.
    import infra.config  # noqa: F401
    import infra.main  # noqa: F401
    import infra.outputs  # noqa: F401
    import jobs.cli.convert  # noqa: F401
    import jobs.cli.run_job  # noqa: F401
    import jobs.legacy.convert  # noqa: F401
    import jobs.schedule  # noqa: F401

    results = []
    for attempt in attempts:
        sys.stdout.flush()
        start = time.perf_counter()
        pid = os.fork()
        if pid == 0:
            _child(attempt)
        _, status, usage = os.wait4(pid, 0)
        wall = time.perf_counter() - start
        code = os.waitstatus_to_exitcode(status)
        results.append({"status": code, "wall_s": round(wall, 3),
                        "cpu_s": round(usage.ru_utime + usage.ru_stime, 3), "maxrss_kb": usage.ru_maxrss})
    json.dump(results, sys.stdout)


def _child(attempt: dict) -> None:
    code = 1
    try:
        for fd, path in ((1, attempt["out"]), (2, attempt["err"])):
            target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(target, fd)
            os.close(target)
        os.environ.update(attempt.get("env", {}))
        resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))
        signal.alarm(HARD_LIMIT_S)
        sys.argv = [attempt["script"], *attempt["args"]]
        try:
            runpy.run_path(attempt["script"], run_name="__main__")
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # noqa: BLE001 - shown to the test, which refuses any traceback
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


if __name__ == "__main__":
    main()
