"""Run several of the standalone scoring scripts beside this one in ONE fresh interpreter, one after another.

    python tests/trainer/score_many.py RUNS_JSON   # RUNS_JSON: [[SCRIPT, ARG, ...], ...]

Each script runs as ``python SCRIPT ARG ...`` would (as ``__main__``, with that sys.argv, its stdout
captured), so an export is still reloaded by TensorFlow alone, in a process that never trained. Prints one
JSON line, a list with per run {"result": what the script's last stdout line held} or {"error": the
traceback}; a failed run does not stop the next. Standalone like the scripts (nothing from this repository):
the prebuilt-stack tests run it inside a foreign TensorFlow stack, where every interpreter pays TensorFlow's
import (about 8 s of CPU on two cores) once, not once per export.
"""

import contextlib
import io
import json
import runpy
import sys
import traceback


def main(runs: list) -> list:
    results = []
    for script, *args in runs:
        out, argv = io.StringIO(), sys.argv
        sys.argv = [script, *args]
        try:
            with contextlib.redirect_stdout(out):
                runpy.run_path(script, run_name="__main__")
            results.append({"result": json.loads(out.getvalue().strip().splitlines()[-1])})
        except BaseException:  # SystemExit included: the script failed, this run records it
            results.append({"error": traceback.format_exc() + out.getvalue()[-2000:]})
        finally:
            sys.argv = argv
    return results


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))))
