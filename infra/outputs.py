"""The names a training job needs from the infrastructure, before and after a deploy (pure: no CDK import).

    from infra.outputs import resolve_outputs
    resolve_outputs("dev")  # .infra-outputs/dev.json if a deploy wrote it, else planned from config

A deploy writes the CLI's outputs file: `cdktn deploy dev --outputs-file .infra-outputs/dev.json`. Its shape
is `{"<stack>": {"<output id>": value, "<construct id>": {...nested outputs...}}}` (cdktn-cli `saveOutputs`
over `getConstructIdsForOutputs`): one key per deployed stack, outputs keyed by their construct id. The stacks
define their outputs directly on the stack with exactly the ids in `OUTPUT_KEYS`, so
`data["dev"]["data_bucket"]` is the value. Sensitive outputs are omitted by the CLI; none of ours is
sensitive.

The TensorBoard's numeric id is assigned by Vertex AI at creation, so before a deploy its resource name
carries the placeholder id `PENDING_DEPLOY`; `is_pending(value)` tells. Everything else is identical before
and after, the endpoints included: each `endpoints.<name>` of the config is an output `endpoint_<name>`
holding its resource name (`projects/<project>/locations/<region>/endpoints/<id>`, the id chosen by
infra.naming.endpoint_id), and `endpoints_in(outputs)` maps the names back:

    endpoints_in(resolve_outputs("dev"))["recommender"]  # projects/acme-ml-dev/locations/.../endpoints/...
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from common import reader
from infra.config import ConfigError, EnvironmentConfig, config_error, load_environment
from infra.naming import (
    ResourceNames,
    endpoint_id,
    registry_url,
    resource_names,
    service_account_email,
    workload_identity_provider,
)

REPO_ROOT = Path(__file__).resolve().parent.parent
OUTPUTS_DIR = REPO_ROOT / ".infra-outputs"

PENDING_DEPLOY = "PENDING_DEPLOY"
# Output `endpoint_<name>` per configured endpoint; no other output key starts with it.
ENDPOINT_OUTPUT_PREFIX = "endpoint_"


def tensorboard_prefix(cfg: EnvironmentConfig) -> str:
    return f"projects/{cfg.project_id}/locations/{cfg.region}/tensorboards/"


@dataclass(frozen=True)
class Output:
    """One output of the platform stack, described once: the plan (`planned_outputs`) and the stack
    (`infra.stack.PlatformStack`) both read `OUTPUTS`.

    `planned` is the value from the config alone (what jobs read before a deploy). `kind` and `of` say what
    the output names in the stack, and the stack's value and the grants Terraform finishes before writing the
    output follow from them: a `bucket` (`of`: its role in infra.naming) is its `gs://` name, waiting for the
    bucket's grants; the `registry` (`of`: a path in it, or "") its URL, waiting for the registry's grants;
    the `tensorboard` its deployed resource name; an `account` of the bootstrap stack (`of`: runtime, builder
    or deployer) the literal email, waiting for the grants this stack gives it; an `endpoint` (`of`: its name
    in the config) its resource name, waiting for its logging grant; a `config` value the literal.
    """

    key: str
    planned: Callable[[EnvironmentConfig, ResourceNames], str]
    kind: Literal["config", "bucket", "registry", "tensorboard", "account", "endpoint"] = "config"
    of: str = ""


def _bucket(key: str, role: str) -> Output:
    return Output(key, lambda cfg, names: f"gs://{names.bucket(role)}", "bucket", role)


def _account(key: str, who: str) -> Output:
    return Output(key, lambda cfg, names: service_account_email(cfg, getattr(names, f"{who}_account_id")),
                  "account", who)


OUTPUTS = (
    Output("project", lambda cfg, names: cfg.project_id),
    Output("project_number", lambda cfg, names: cfg.project_number),
    Output("region", lambda cfg, names: cfg.region),
    _bucket("data_bucket", "data"),
    _bucket("staging_bucket", "staging"),
    _bucket("models_bucket", "models"),
    _bucket("tensorboard_logs_bucket", "tensorboard-logs"),
    _account("runtime_service_account", "runtime"),
    Output("tensorboard", lambda cfg, names: tensorboard_prefix(cfg) + PENDING_DEPLOY, "tensorboard"),
    Output("artifact_registry", lambda cfg, names: registry_url(cfg), "registry"),
    Output("trainer_image", lambda cfg, names: f"{registry_url(cfg)}/trainer", "registry", "trainer"),
    # What the Cloud Build builds of trainer_image run as (scripts/run_job.py and the deploy workflow).
    _account("builder_service_account", "builder"),
    # What .github/workflows/deploy.yml authenticates with (repository variables set once from these).
    Output("workload_identity_provider", lambda cfg, names: workload_identity_provider(cfg)),
    _account("deployer_service_account", "deployer"),
)
# The keys every environment's outputs have; `output_keys(cfg)` adds its endpoints'.
OUTPUT_KEYS = tuple(output.key for output in OUTPUTS)


def endpoint_resource_names(cfg: EnvironmentConfig) -> dict[str, str]:
    """Endpoint name in the config -> `projects/<project>/locations/<region>/endpoints/<id>`, before and after
    a deploy (the stack creates each endpoint with this id)."""
    names: dict[str, str] = {}
    taken: dict[str, str] = {}
    for endpoint in cfg.endpoints:
        id_ = endpoint_id(cfg, endpoint.name)
        if id_ in taken:  # two names hashing to one id: ~1 in 10^7 for 100 endpoints, but never silently
            problem = f"its endpoint id {id_} is also endpoints.{taken[id_]}'s; allowed: another name"
            raise ConfigError(cfg.source, f"endpoints.{endpoint.name}", problem)
        taken[id_] = endpoint.name
        names[endpoint.name] = f"projects/{cfg.project_id}/locations/{cfg.region}/endpoints/{id_}"
    return names


def endpoint_output_key(name: str) -> str:
    return f"{ENDPOINT_OUTPUT_PREFIX}{name}"


def endpoints_in(outputs: Mapping[str, str]) -> dict[str, str]:
    """Endpoint name -> resource name, from what `resolve_outputs` returned (planned or deployed)."""
    return {key.removeprefix(ENDPOINT_OUTPUT_PREFIX): value for key, value in outputs.items()
            if key.startswith(ENDPOINT_OUTPUT_PREFIX)}


def platform_outputs(cfg: EnvironmentConfig) -> tuple[Output, ...]:
    """`OUTPUTS` and one `endpoint_<name>` row per configured endpoint: the platform stack's outputs."""
    resources = endpoint_resource_names(cfg)
    return OUTPUTS + tuple(
        Output(endpoint_output_key(name), lambda cfg, names, value=value: value, "endpoint", name)
        for name, value in resources.items())


def output_keys(cfg: EnvironmentConfig) -> tuple[str, ...]:
    return tuple(output.key for output in platform_outputs(cfg))

# The bootstrap stack's outputs (`<env>-bootstrap`, applied by an administrator): the two repository variables
# of the deploy workflow and the accounts it creates. The platform stack reports the same values under the
# same keys, as literals (infra.naming), so a job reads one file.
BOOTSTRAP_OUTPUT_KEYS = (
    "project",
    "workload_identity_provider",
    "deployer_service_account",
    "runtime_service_account",
    "builder_service_account",
)

# Output key -> bucket role in infra.naming.
BUCKET_OUTPUTS = {output.key: output.of for output in OUTPUTS if output.kind == "bucket"}


def is_pending(value: str) -> bool:
    """True for a value that only a deploy can fill in (today: the planned TensorBoard resource name)."""
    return value.rsplit("/", 1)[-1] == PENDING_DEPLOY


def planned_outputs(cfg: EnvironmentConfig) -> dict[str, str]:
    names = resource_names(cfg)
    return {output.key: output.planned(cfg, names) for output in platform_outputs(cfg)}


def default_outputs_file(env: str) -> Path:
    return OUTPUTS_DIR / f"{env}.json"


def deployed_outputs(path: Path | str, env: str, keys: tuple[str, ...] = OUTPUT_KEYS) -> dict[str, str]:
    """Read the outputs `keys` of stack `env` from a `cdktn deploy --outputs-file` JSON file."""
    path = Path(path)
    data = _read_json(path)
    if not isinstance(data, dict) or not isinstance(data.get(env), dict):
        stacks = ", ".join(sorted(data)) if isinstance(data, dict) else "none"
        raise ConfigError(path, env, f"no outputs for stack {env!r} (stacks in file: {stacks or 'none'}); "
                                     f"allowed: the file `cdktn deploy {env} --outputs-file {path}` writes")
    stack = data[env]
    result = {}
    for key in keys:
        value = stack.get(key)
        if not isinstance(value, str) or not value:
            raise ConfigError(path, f"{env}.{key}", f"got {value!r}; allowed: a non-empty string (redeploy "
                                                    "the stack to refresh the outputs file)")
        result[key] = value
    return result


def resolve_outputs(env: str, outputs_file: Path | str | None = None) -> dict[str, str]:
    """Deployed outputs when the outputs file has this stack, else the outputs planned from the config.

    An explicitly named `outputs_file` must exist and hold the stack; the default `.infra-outputs/<env>.json`
    is used only when it exists and holds the stack (a file from another environment's deploy is not an
    error).
    """
    cfg = load_environment(env)
    path = Path(outputs_file) if outputs_file is not None else default_outputs_file(env)
    if outputs_file is None and not (path.is_file() and _has_stack(path, env)):
        return planned_outputs(cfg)
    # Every key of this config: a file from before an endpoint was added is refused as stale.
    deployed = deployed_outputs(path, env, output_keys(cfg))
    # A file left from a deploy of another project/region would send jobs to the wrong place.
    for key, expected in (("project", cfg.project_id), ("region", cfg.region)):
        if deployed[key] != expected:
            raise ConfigError(path, f"{env}.{key}",
                              f"got {deployed[key]!r} but {cfg.source} says {expected!r}; allowed: the "
                              f"outputs of a deploy of this config (cdktn deploy {env} --outputs-file ...)")
    return deployed


def _has_stack(path: Path, env: str) -> bool:
    try:
        data = _read_json(path)
    except ConfigError:
        return True  # let deployed_outputs report the broken file
    return not isinstance(data, dict) or env in data


def _read_json(path: Path) -> Any:
    """The outputs file, read within common.reader's limits (a regular file, size, depth, numbers)."""
    allowed = "the CLI's outputs file"
    try:
        return reader.plain_json(reader.read_text(path, allowed), str(path), allowed)
    except reader.SyntaxProblem as exc:
        raise ConfigError(path, "<document>", f"not valid JSON at line {exc.line}; allowed: {allowed}") \
            from None
    except reader.InputError as exc:
        raise config_error(path, exc) from None
