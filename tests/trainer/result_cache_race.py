"""One trial of a race of two over the same data (tests/trainer/test_result_cache.py), as
``python -m trainer.task``.

    python -m tests.trainer.result_cache_race SIGNALS NAME OTHER -- ARGS...   # ARGS: after `-m trainer.task`

The run is ``trainer.task.main(ARGS)`` with census's scan of a file (``trainer.csv_scan._scan_files``)
counted: each call appends a line to ``SIGNALS/scans-NAME``. The race is made certain rather than likely: the
first run to scan (the data missed, the scan claimed) writes its name to ``SIGNALS/claimed`` and scans only
once the other run's log, ``SIGNALS/OTHER.log``, says it waits for that claim (at most 60 s). The race is over
once the data is accepted and cached: a run stops where training would start (status 0, "stopped before
training" on stdout), past the point where ``trainer.train`` caches the results and gives its claims up. Last
on stdout: the claims this interpreter still holds once ``main`` returned (``held: []``), however the run
ended (tests/trainer/cli_batch.py runs many mains in one interpreter).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

WAITING = "waiting for another run computing the same"


class Stop(Exception):
    pass


def main(signals: Path, name: str, other: str, argv: list[str]) -> int:
    import trainer.callbacks
    import trainer.csv_scan
    from trainer import task

    scan = trainer.csv_scan._scan_files

    def counted(*args, **kwargs):
        with open(signals / f"scans-{name}", "a") as out:
            out.write("scan\n")
        try:
            fd = os.open(signals / "claimed", os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        except FileExistsError:
            return scan(*args, **kwargs)
        os.write(fd, name.encode())
        os.close(fd)
        log, deadline = signals / f"{other}.log", time.monotonic() + 60
        while time.monotonic() < deadline and WAITING not in (log.read_text() if log.exists() else ""):
            time.sleep(0.05)
        return scan(*args, **kwargs)

    def stop(*args, **kwargs):  # trainer.train reads the backup's epoch right after caching the data's work
        raise Stop

    trainer.csv_scan._scan_files = counted
    trainer.callbacks.read_backup_epoch = stop
    from trainer import result_cache

    try:
        status = task.main(argv)
    except Stop:
        print("stopped before training")
        status = 0
    print(f"held: {result_cache.held()}")
    return status


if __name__ == "__main__":
    assert sys.argv[4] == "--", sys.argv
    sys.exit(main(Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[5:]))
