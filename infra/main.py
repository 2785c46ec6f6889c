"""The CDK app (`cdktf.json` runs it): two stacks per environment config in infra/environments/<env>.yaml.

    <env>-bootstrap   identities, workload identity federation, every project-level IAM grant, Data Access
                      audit logs; applied by a project administrator (infra/bootstrap.py)
    <env>             buckets, registry, TensorBoard, APIs, resource-level IAM; applied by CI (infra/stack.py)

    cdktn synth                     # all stacks -> cdktf.out/stacks/<stack>/cdk.tf.json (+ checkov config)
    cdktn deploy dev-bootstrap      # as a project administrator: once, and when identities or IAM change
    cdktn deploy dev --outputs-file .infra-outputs/dev.json
    python scripts/synth.py [dev]   # synth without the CLI (same output), all environments or those named
    python -m infra.policy          # checkov on each synthesized stack on its own, with its own skips

The app the CLI runs is scripts/synth.py: it calls `main` here with the jobs layer's schedule compiler,
since a schedule's request is compiled from a job file (jobs/) and infra/ never imports jobs/.
`python -m infra.main` synthesizes environments without schedules and refuses the others.

Environment variables: INFRA_STACKS=dev,prod limits the stacks: an environment name selects both of its
stacks (`dev` -> dev and dev-bootstrap), `dev-bootstrap` selects that stack alone; INFRA_ENVIRONMENTS_DIR
reads configs from another directory; CDKTF_OUTDIR (set by the CLI) is the output directory. A broken config
prints one line naming the file and field and exits with status 2.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from infra.config import ConfigError, EnvironmentConfig, list_environments, load_environment
from infra.naming import BOOTSTRAP_SUFFIX, bootstrap_stack_name
from infra.schedules import ScheduledRun

STACKS_VAR = "INFRA_STACKS"
# EnvironmentConfig -> its schedules compiled (jobs.schedule.compile_schedules); raises ConfigError.
ScheduleCompiler = Callable[[EnvironmentConfig], Sequence[ScheduledRun]]


def selected_names(names: Sequence[str] | None = None) -> list[str]:
    """The requested entries (arguments, else INFRA_STACKS, else every environment), repeats dropped."""
    if names is None:
        wanted = os.environ.get(STACKS_VAR, "")
        names = [n.strip() for n in wanted.split(",") if n.strip()] or list_environments()
    return list(dict.fromkeys(names))


def selected_stacks(names: Sequence[str] | None = None) -> list[str]:
    """Stack names: an environment name stands for `<env>-bootstrap` and `<env>`."""
    stacks = []
    for name in selected_names(names):
        stacks += [name] if name.endswith(BOOTSTRAP_SUFFIX) else [bootstrap_stack_name(name), name]
    return list(dict.fromkeys(stacks))


def selected_environments(names: Sequence[str] | None = None) -> list[EnvironmentConfig]:
    envs = [name.removesuffix(BOOTSTRAP_SUFFIX) for name in selected_names(names)]
    # A repeated name would be a second stack with the same construct id: jsii fails with a traceback.
    return [load_environment(env) for env in dict.fromkeys(envs)]


def compile_schedules(configs: Sequence[EnvironmentConfig],
                      compiler: ScheduleCompiler | None) -> dict[str, tuple[ScheduledRun, ...]]:
    """{environment: its compiled schedules}; an environment with schedules needs a compiler."""
    compiled = {}
    for cfg in configs:
        if cfg.schedules and compiler is None:
            raise ConfigError(cfg.source, "schedules", "compiling them needs the jobs layer; "
                                                       "allowed: synthesize with `cdktn synth` or "
                                                       "`python scripts/synth.py`")
        compiled[cfg.name] = tuple(compiler(cfg)) if cfg.schedules else ()
    return compiled


def build_app(configs: Sequence[EnvironmentConfig], outdir: str | Path | None = None,
              stacks: Sequence[str] | None = None,
              schedules: Mapping[str, Sequence[ScheduledRun]] | None = None):
    """The app with a `BootstrapStack` and a `PlatformStack` per config (only those named in `stacks`, if
    given); returns it with {stack name: stack}. outdir defaults to CDKTF_OUTDIR (the CLI) or cdktf.out.
    `schedules` holds each environment's compiled schedules (`compile_schedules`): both stacks build from
    them (the workflows; what the schedule account may do)."""
    # The CDK is imported here, not at module level, so a broken config fails in milliseconds.
    from infra.bootstrap import BootstrapStack
    from infra.cdk import App
    from infra.stack import PlatformStack

    app = App(outdir=str(outdir)) if outdir is not None else App()
    built = {}
    for cfg in configs:
        compiled = tuple((schedules or {}).get(cfg.name, ()))
        if stacks is None or bootstrap_stack_name(cfg) in stacks:
            built[bootstrap_stack_name(cfg)] = BootstrapStack(app, cfg, compiled)
        if stacks is None or cfg.name in stacks:
            built[cfg.name] = PlatformStack(app, cfg, compiled)
    return app, built


def synth(configs: Sequence[EnvironmentConfig], outdir: str | Path | None = None,
          stacks: Sequence[str] | None = None,
          schedules: Mapping[str, Sequence[ScheduledRun]] | None = None) -> Path:
    """Synthesize `configs` and write each stack's checkov config for its skips; returns the output dir."""
    from infra.policy import write_checkov_config

    app, _ = build_app(configs, outdir, stacks, schedules)
    app.synth()
    out = Path(app.outdir)
    write_checkov_config(out)
    return out


def main(argv: Sequence[str] | None = None, compiler: ScheduleCompiler | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    stacks = selected_stacks(argv or None)
    try:
        configs = selected_environments(argv or None)
        # Both stacks need them: the platform stack's workflows, and the schedule account's permissions in the
        # bootstrap stack (a schedule that registers its model needs more).
        schedules = compile_schedules(configs, compiler)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    # Read here rather than by the CDK: its Node process may have started before the variable was set.
    synth(configs, os.environ.get("CDKTF_OUTDIR") or None, stacks, schedules)
    return 0


if __name__ == "__main__":
    sys.exit(main())
