"""Run ``run_local`` in its own process, as ``scripts/run_job.py --local`` does, for signal tests.

python -m tests.jobs.local.driver BODY.json LOCAL_ROOT [--resume]
"""

import json
import signal
import sys
from pathlib import Path

from jobs.local.run import run_local
from tests.jobs.local.helpers import OUTPUTS, REPO_ROOT

if __name__ == "__main__":
    # Stand in for a run started from a terminal, where Ctrl-C reaches it: a process started in the background
    # by a non-interactive shell (e.g. `make test &`) inherits SIGINT ignored, and Python keeps it ignored.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    body = json.loads(Path(sys.argv[1]).read_text())
    kind = "HyperparameterTuningJob" if "studySpec" in body else "CustomJob"
    sys.exit(
        run_local(
            kind,
            body,
            OUTPUTS,
            repo_root=REPO_ROOT,
            local_root=Path(sys.argv[2]),
            resume="--resume" in sys.argv,
        )
    )
