"""`run_job.py deploy MODEL@ALIAS --endpoint NAME`, `undeploy MODEL@ALIAS --endpoint NAME` and
`rollback --endpoint NAME`: a registered version on one of the environment's Vertex AI endpoints.

  python scripts/run_job.py deploy recommender@production --endpoint recommender --dry-run
  python scripts/run_job.py deploy recommender@production --endpoint recommender --traffic 10
  python scripts/run_job.py rollback --endpoint recommender

deploy sends one DeployModelRequest: the version on --machine-type (a Vertex AI prediction machine, with
--accelerator-type/--accelerator-count as the catalogue allows), --min-replicas to --max-replicas, scaled on
--cpu-target, taking --traffic percent of the endpoint's traffic (the models already there keep their shares
of the rest) or the whole --traffic-split. A version deployed there already is not deployed again. Then one
smoke prediction through the endpoint: --instance, or the example request the trainer's export wrote
beside the model. --dry-run prints the request and sends nothing.
undeploy takes a version off (its traffic goes to the others in proportion); rollback takes off the model the
last deploy added and puts back the traffic split from before it. With --dry-run both read the endpoint (what
it serves decides the request) and print the UndeployModelRequest, changing nothing.

Bad input (a malformed MODEL@ALIAS, an endpoint the environment does not have, a machine the catalogue lacks,
a split that does not sum to 100, a version the registry does not have) is one line and exit status 2, with
nothing deployed; a cloud failure is one line and exit status 1, the endpoint's traffic where it was.
"""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path

from jobs.api import DEFAULT_ENV
from jobs.cli.common import EXIT_BAD_INPUT, EXIT_INTERRUPTED, Parser, cloud_failure

# The deploy settings' flags, by the field of a definition's deploy block they give.
SETTING_FLAGS = {
    "machineType": "--machine-type",
    "acceleratorType": "--accelerator-type",
    "acceleratorCount": "--accelerator-count",
    "minReplicaCount": "--min-replicas",
    "maxReplicaCount": "--max-replicas",
    "cpuUtilizationTarget": "--cpu-target",
    "traffic": "--traffic",
    "trafficSplit": "--traffic-split",
    "endpoint": "--endpoint",
}
HELP = {
    "--machine-type": "a Vertex AI prediction machine (default n1-standard-4)",
    "--accelerator-type": "e.g. NVIDIA_TESLA_T4, as the machine takes",
    "--accelerator-count": "how many (default 1 with --accelerator-type)",
    "--min-replicas": "replicas always running (default 1)",
    "--max-replicas": "replicas autoscaling may add up to (default --min-replicas)",
    "--cpu-target": "autoscale at this CPU utilisation, percent (Vertex AI's default 60)",
    "--traffic": "the new version's percent of the endpoint's traffic (default 100); the others keep "
    "their shares of the rest",
    "--traffic-split": "the whole split instead: DEPLOYED_MODEL_ID=PERCENT,..., 0 for the new version, "
    "summing to 100",
}


def build_parser(verb: str) -> argparse.ArgumentParser:
    p = Parser(prog=f"run_job.py {verb}", description=__doc__,
               formatter_class=argparse.RawDescriptionHelpFormatter)
    if verb != "rollback":
        p.add_argument("ref", metavar="MODEL@ALIAS", help="a registered version, e.g. census@production")
    p.add_argument("--endpoint", required=True, metavar="NAME", help="one of the environment's endpoints")
    p.add_argument("--env", default=DEFAULT_ENV, help=f"the infra environment (default {DEFAULT_ENV})")
    p.add_argument("--outputs-file", type=Path, metavar="PATH", help="deployed outputs JSON")
    if verb == "deploy":
        for flag, about in HELP.items():
            p.add_argument(flag, dest=flag[2:].replace("-", "_"), metavar="VALUE", help=about)
        p.add_argument("--instance", metavar="JSON", help="the instance the smoke prediction sends (default: "
                       "the first of the example_request.json the export wrote beside the model)")
        p.add_argument("--dry-run", action="store_true", help="print the DeployModelRequest; send nothing")
    else:
        p.add_argument("--dry-run", action="store_true", help="read the endpoint and print the "
                       "UndeployModelRequest it would send; change nothing")
    return p


def main(verb: str, argv: list[str], call) -> int:
    args = build_parser(verb).parse_args(argv)
    from jobs import api

    try:
        outputs = call.outputs if call.outputs is not None else api.load_outputs(args.env, args.outputs_file,
                                                                                 verb)
        if verb == "rollback":
            target = api.deploy_target(args.env, outputs, args.endpoint, verb)
            return _run(verb, call, target, args=args)
        settings = {"endpoint": args.endpoint}
        if verb == "deploy":
            for field, flag in SETTING_FLAGS.items():
                value = getattr(args, flag[2:].replace("-", "_"))
                if value is not None:
                    settings[field] = value
        ref, spec = api.deploy_settings(args.ref, settings, SETTING_FLAGS, verb)
        target = api.deploy_target(args.env, outputs, args.endpoint, verb)
        if verb == "undeploy":
            return _run(verb, call, target, ref=ref, args=args)
        instance = api.smoke_instance(args.instance)
        if args.dry_run:
            print(json.dumps(api.preview_deploy(ref, spec, target), indent=2), file=call.out)
            return 0
        return _run(verb, call, target, ref=ref, spec=spec, instance=instance, args=args)
    except api.JobError as exc:
        print(str(exc), file=call.err)
        return EXIT_BAD_INPUT


def _run(verb: str, call, target, *, ref=None, spec=None, instance=None, args=None) -> int:
    from jobs.api import JobError, SmokeFailed, run_deploy

    try:
        run_deploy(verb, call.factory, target, call.out, ref=ref, spec=spec, instance=instance,
                   dry_run=verb != "deploy" and args.dry_run)
    except JobError:
        raise
    except SmokeFailed as failed:
        print(
            f"run_job.py: the smoke prediction failed ({failed}); {ref} stays deployed with its share of "
            f"traffic. Put the traffic back with: python scripts/run_job.py rollback --endpoint {target.name}"
            f"{_env(args)}",
            file=call.err,
        )
        return 1
    except KeyboardInterrupt:
        print(f"interrupted; the endpoint's traffic changes only once a {verb} completes: run the same "
              "command again to finish it", file=call.err)
        return EXIT_INTERRUPTED
    except Exception as exc:  # noqa: BLE001 - cloud/auth failures: one line, no traceback
        line = io.StringIO()
        status = cloud_failure(exc, line)
        if verb != "deploy" and args.dry_run:
            print(f"{line.getvalue().rstrip()}; nothing was changed (--dry-run)", file=call.err)
            return status
        print(f"{line.getvalue().rstrip()}; {verb} did not complete and the endpoint's traffic is where it "
              "was: running the same command again finishes it (a version deployed already is not deployed "
              "twice)",
              file=call.err)
        return status
    return 0


def _env(args) -> str:
    return "" if args is None or args.env == DEFAULT_ENV else f" --env {args.env}"
