#!/usr/bin/env python3
"""The CDK app (`cdktf.json` runs it): every environment's stacks, with their schedules compiled from jobs/.

    cdktn synth                          # runs this; stacks -> cdktf.out/stacks/<stack>/cdk.tf.json
    python scripts/synth.py [dev ...]    # the same without the CLI: all environments or those named
    INFRA_STACKS=dev-bootstrap cdktn synth

infra/main.py does the work and documents the stacks and variables. This script only hands it the jobs
layer's schedule compiler (jobs/schedule.py): a schedule's request is compiled from a job file exactly as
`run_job.py --dry-run` compiles it, and infra/ never imports jobs/. A broken config or scheduled job file
prints one line naming the file and field and exits with status 2, before anything is synthesized.
"""

import sys
from pathlib import Path

# Run as a script: make the repo root importable (infra/, jobs/).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from infra.main import main  # noqa: E402 - after the path setup above
from jobs.schedule import compile_schedules  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(compiler=compile_schedules))
