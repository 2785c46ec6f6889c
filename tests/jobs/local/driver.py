"""Run ``run_local`` in its own process, as ``scripts/run_job.py --local`` does, for signal tests.

python -m tests.jobs.local.driver BODY.json LOCAL_ROOT [--resume]
"""

import json
import sys
from pathlib import Path

from jobs.local import run_local
from tests.jobs.local.helpers import OUTPUTS, REPO_ROOT

if __name__ == "__main__":
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
