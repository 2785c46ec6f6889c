"""The CDK app (`cdktf.json` runs it): one stack per environment config in infra/environments/.

    cdktn synth                     # all stacks -> cdktf.out/stacks/<env>/cdk.tf.json
    cdktn deploy dev --outputs-file .infra-outputs/dev.json
    python -m infra.main            # synth without the CLI (same output)

Environment variables: INFRA_STACKS=dev,prod limits the stacks; INFRA_ENVIRONMENTS_DIR reads configs from
another directory; CDKTF_OUTDIR (set by the CLI) is the output directory. A broken config prints one line
naming the file and field and exits with status 2.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

from infra.config import ConfigError, EnvironmentConfig, list_environments, load_environment

STACKS_VAR = "INFRA_STACKS"


def selected_environments(names: Sequence[str] | None = None) -> list[EnvironmentConfig]:
    if names is None:
        wanted = os.environ.get(STACKS_VAR, "")
        names = [n.strip() for n in wanted.split(",") if n.strip()] or list_environments()
    # A repeated name would be a second stack with the same construct id: jsii fails with a traceback.
    return [load_environment(name) for name in dict.fromkeys(names)]


def build_app(configs: Sequence[EnvironmentConfig], outdir: str | Path | None = None):
    """The app with one `PlatformStack` per config; outdir defaults to CDKTF_OUTDIR (the CLI) or cdktf.out."""
    # The CDK is imported here, not at module level, so a broken config fails in milliseconds.
    from infra.cdk import App
    from infra.stack import PlatformStack

    app = App(outdir=str(outdir)) if outdir is not None else App()
    return app, {cfg.name: PlatformStack(app, cfg) for cfg in configs}


def synth(configs: Sequence[EnvironmentConfig], outdir: str | Path | None = None) -> Path:
    """Synthesize `configs` and write the checkov config for their skips; returns the output directory."""
    from infra.policy import write_checkov_config

    app, _ = build_app(configs, outdir)
    app.synth()
    out = Path(app.outdir)
    write_checkov_config(out)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    try:
        configs = selected_environments(argv or None)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    # Read here rather than by the CDK: its Node process may have started before the variable was set.
    synth(configs, os.environ.get("CDKTF_OUTDIR") or None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
