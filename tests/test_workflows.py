"""Supply-chain hardening of the GitHub Actions workflows, Dependabot and .gitignore.

Each rule is a function that returns the problems it finds (an empty list when the file is right). The tests
run every rule on the real files, and again on a copy broken the way a review would miss it (a tag pin, auth
before the install, a dev install, ...), so a rule that could never fail fails here instead.
"""

from __future__ import annotations

import ast
import copy
import functools
import json
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
WORKFLOWS = ROOT / ".github" / "workflows"
DEPENDABOT = ROOT / ".github" / "dependabot.yml"
DEPLOY_BRANCH = "main"

AUTH = "google-github-actions/auth@"
SETUP_TERRAFORM = "hashicorp/setup-terraform@"
# owner/repo[/path]@<full commit SHA>  # v<version>
PINNED = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+(/[^@\s]+)?@[0-9a-f]{40}$")
TAG_COMMENT = re.compile(r"^#\s*v\d+(\.\d+)*\S*$")
USES_LINE = re.compile(r"^\s*(?:-\s+)?uses:\s*(?P<ref>[^\s#]+)\s*(?P<comment>#.*)?$")
INSTALLS = re.compile(r"pipenv (sync|install)|npm (ci|install|i)\b|pip install|make (python-|node-)?deps")


def load(text: str) -> dict:
    """The workflow, `on:` under the key "on" (a fresh copy: tests break it freely)."""
    return copy.deepcopy(_parse(text))


@functools.lru_cache(maxsize=64)
def _parse(text: str) -> dict:
    doc = yaml.safe_load(text)
    if True in doc:  # YAML 1.1 (PyYAML) reads the bare key `on` as the boolean True
        doc["on"] = doc.pop(True)
    return doc


def workflow_texts() -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(WORKFLOWS.glob("*.y*ml"))}


def steps(doc: dict) -> list[dict]:
    return [step for job in doc["jobs"].values() for step in job.get("steps", [])]


def uses_refs(doc: dict) -> list[str]:
    """Every `uses:` of the workflow: steps' actions and jobs' reusable workflows."""
    jobs = doc["jobs"].values()
    return [s["uses"] for s in steps(doc) if "uses" in s] + [j["uses"] for j in jobs if "uses" in j]


# --- rules -------------------------------------------------------------------------------------------------


def pin_problems(text: str) -> list[str]:
    """Every `uses:` is owner/repo[/path]@<40-hex SHA> with its tag (`# vX.Y.Z`) in a comment on that line."""
    problems = []
    written = set()
    for number, line in enumerate(text.splitlines(), 1):
        m = USES_LINE.match(line)
        if m:
            written.add(m["ref"].strip("'\""))
            if not TAG_COMMENT.match((m["comment"] or "").strip()):
                problems.append(f"line {number}: no `# vX...` tag comment after {m['ref']}")
    for ref in uses_refs(load(text)):
        if not PINNED.match(ref):
            problems.append(f"{ref}: not pinned by a full commit SHA")
        if ref not in written:
            problems.append(f"{ref}: not a one-line `uses: ref # vX` (its tag comment can't be read)")
    return problems


def deploy_problems(doc: dict) -> list[str]:
    """deploy.yml installs runtime packages only, before it authenticates; pins Terraform; deploys prod."""
    problems = []
    all_steps = steps(doc)
    uses = [s.get("uses", "") for s in all_steps]
    runs = [s.get("run", "") for s in all_steps]
    auth = [i for i, u in enumerate(uses) if u.startswith(AUTH)]
    terraform = [i for i, u in enumerate(uses) if u.startswith(SETUP_TERRAFORM)]
    installs = [i for i, r in enumerate(runs) if INSTALLS.search(r)]
    if len(auth) != 1 or len(terraform) != 1 or not installs:
        return [f"want one auth step, one setup-terraform, an install: {auth=} {terraform=} {installs=}"]
    if max(installs) > auth[0]:
        problems.append("a step installs packages after the job authenticated to Google Cloud")
    if terraform[0] > auth[0]:
        problems.append("setup-terraform runs after the job authenticated to Google Cloud")
    install = "\n".join(runs[i] for i in installs)
    if "--dev" in install or re.search(r"\bmake (deps|python-deps|node-deps)\b", install):
        problems.append("the deploy install includes dev packages (`--dev`, `make deps`)")
    other = re.search(r"pipenv install\b|pip install\b(?!.*pipenv==)", install)
    if not re.search(r"pipenv sync\b", install) or other:
        problems.append("Python packages must come from the lock: `pipenv sync` (no --dev), nothing else")
    for cmd in re.findall(r"npm (?:ci|install|i)\b[^\n;&|]*", install):
        if not cmd.startswith("npm ci") or "--ignore-scripts" not in cmd:
            problems.append(f"`{cmd}`: the deploy installs node packages only with `npm ci --ignore-scripts`")
        # The cdktn CLI is a devDependency of package.json: leaving dev out leaves the deploy without its CLI.
        if "--omit=dev" in cmd or "--production" in cmd:
            problems.append(f"`{cmd}` leaves out devDependencies, the cdktn CLI among them")
    with_ = all_steps[terraform[0]].get("with") or {}
    if not re.fullmatch(r"\d+\.\d+\.\d+", str(with_.get("terraform_version", ""))):
        problems.append(f"terraform_version must be an exact X.Y.Z, not {with_.get('terraform_version')!r}")
    if with_.get("terraform_wrapper") is not False:
        problems.append("terraform_wrapper must be false")
    deploys = re.findall(r"cdktn deploy\b([^\n]*)", "\n".join(runs))
    if not deploys or any(d.split()[:1] != ["prod"] or " --auto-approve" not in d for d in deploys):
        problems.append(f"CI deploys the `prod` stack only, one stack per command: {deploys}")
    return problems


def trigger_problems(doc: dict, events: tuple[str, ...]) -> list[str]:
    """The deploy runs on exactly the events the workload identity provider accepts; pushes to main only."""
    on = doc.get("on")
    names = {on} if isinstance(on, str) else set(on or [])
    problems = [] if names == set(events) else [f"deploy triggers {sorted(names)} != {sorted(events)}"]
    if "push" in names:
        push = on.get("push") if isinstance(on, dict) else None
        if push != {"branches": [DEPLOY_BRANCH]}:
            problems.append(f"push must be filtered to exactly branches: [{DEPLOY_BRANCH}], not {push!r}")
    return problems


def _permission_blocks(doc: dict) -> list:
    return [doc.get("permissions")] + [job.get("permissions") for job in doc["jobs"].values()]


def permission_problems(docs: dict[str, dict], deploy_name: str) -> list[str]:
    """Only the deploy workflow may mint OIDC tokens; every workflow states its token's permissions."""
    problems = []
    for name, doc in docs.items():
        blocks = _permission_blocks(doc)
        if not isinstance(blocks[0], dict):
            problems.append(f"{name}: top-level `permissions:` must be a mapping, not {blocks[0]!r}")
        id_token = any(b == "write-all" or (isinstance(b, dict) and b.get("id-token") == "write")
                       for b in blocks)
        if id_token and name != deploy_name:
            problems.append(f"{name} requests id-token: write; only {deploy_name} may")
        if name == deploy_name and doc.get("permissions") != {"contents": "read", "id-token": "write"}:
            problems.append(f"{name}: permissions must be exactly contents: read, id-token: write")
    ci = docs.get("ci.yml")
    if ci is None or ci.get("permissions") != {"contents": "read"}:
        problems.append("ci.yml: top-level permissions must be exactly contents: read")
    if ci is not None and any(job.get("permissions") for job in ci["jobs"].values()):
        problems.append("ci.yml: no job widens the token")
    return problems


def dependabot_problems(doc: dict) -> list[str]:
    updates = doc.get("updates") or []
    problems = [] if doc.get("version") == 2 else ["dependabot.yml: version must be 2"]
    for ecosystem in ("github-actions", "pip", "npm"):
        entries = [u for u in updates if u.get("package-ecosystem") == ecosystem
                   and "/" in ([u.get("directory")] + list(u.get("directories") or []))]
        if not entries or not all((u.get("schedule") or {}).get("interval") for u in entries):
            problems.append(f"dependabot.yml: no scheduled `{ecosystem}` updates for /")
    return problems


# Paths that must never be committed (state holds secrets in plain text; gha-creds files are live
# credentials), at the root and nested (cdktn's local backend writes terraform.<stack>.tfstate at the root).
MUST_IGNORE = (
    "terraform.tfstate", "terraform.prod.tfstate", "terraform.tfstate.backup",
    "terraform.tfstate.1712345678.backup",
    "infra/terraform.dev.tfstate", "stacks/prod/terraform.tfstate.backup", "stacks/prod/x.tfstate.lock.info",
    "prod.tfplan", "infra/plans/dev.tfplan", "crash.log", "crash.1712345678.log", "infra/crash.log",
    "gha-creds-0123456789abcdef.json", "infra/gha-creds-feed.json",
    ".env", ".env.local", ".env.prod", "infra/.env", "jobs/local/.env.dev",
)
MUST_KEEP = (".env.example", "infra/.env.example", "Pipfile.lock", "package-lock.json", "infra/main.py",
             ".github/workflows/deploy.yml", "infra/environments/prod.yaml", "README.md")


def ignore_problems(gitignore: str, repo: Path) -> list[str]:
    """`git check-ignore` in a scratch repository holding only this .gitignore."""
    if not (repo / ".git").exists():
        repo.mkdir(parents=True, exist_ok=True)
        subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / ".gitignore").write_text(gitignore)
    return _check_ignore(repo)


def _check_ignore(repo: Path) -> list[str]:
    paths = MUST_IGNORE + MUST_KEEP
    # -v -n: one line per path, `source:line:pattern<TAB>path`, `::<TAB>path` when nothing matched.
    proc = subprocess.run(["git", "-C", str(repo), "check-ignore", "--no-index", "--stdin", "-v", "-n"],
                          input="\n".join(paths) + "\n", capture_output=True, text=True)
    assert proc.returncode in (0, 1), proc.stderr
    ignored = set()
    for line in proc.stdout.splitlines():
        source, path = line.split("\t", 1)
        pattern = source.split(":", 2)[2]
        if pattern and not pattern.startswith("!"):
            ignored.add(path)
    return ([f"{p} is not ignored" for p in MUST_IGNORE if p not in ignored]
            + [f"{p} is ignored" for p in MUST_KEEP if p in ignored])


# --- the real files -----------------------------------------------------------------------------------------


CI_IDENTITY = ROOT / "infra" / "constructs" / "ci_identity.py"


def ci_identity_constants() -> tuple[str, tuple[str, ...]]:
    """DEPLOY_WORKFLOW_PATH and DEPLOY_EVENTS, the workflow and events the workload identity provider accepts.

    Read as the module's literal assignments rather than imported: the import loads the CDK (seconds of jsii
    start-up) for two constants.
    """
    names = {"DEPLOY_WORKFLOW_PATH", "DEPLOY_EVENTS"}
    values = {}
    for node in ast.parse(CI_IDENTITY.read_text()).body:
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        for target in targets:
            if isinstance(target, ast.Name) and target.id in names and node.value is not None:
                values[target.id] = ast.literal_eval(node.value)
    assert set(values) == names, f"{CI_IDENTITY} must define {sorted(names)} as literals, found {values}"
    return values["DEPLOY_WORKFLOW_PATH"], tuple(values["DEPLOY_EVENTS"])


def deploy_path() -> Path:
    return ROOT / ci_identity_constants()[0]


def test_both_workflows_exist():
    assert {"ci.yml", "deploy.yml"} <= set(workflow_texts())


@pytest.mark.parametrize("name", sorted(workflow_texts()))
def test_every_action_is_pinned_by_commit_sha_with_its_tag(name):
    text = (WORKFLOWS / name).read_text()
    assert uses_refs(load(text)), f"{name} uses no actions?"
    assert pin_problems(text) == []


def test_the_provider_pins_this_deploy_workflow_and_its_events():
    path, events = ci_identity_constants()
    assert deploy_path().is_file() and deploy_path().parent == WORKFLOWS, path
    assert trigger_problems(load(deploy_path().read_text()), events) == []


def test_the_deploy_installs_runtime_packages_before_it_authenticates():
    assert deploy_problems(load(deploy_path().read_text())) == []


def test_only_the_deploy_workflow_may_request_an_oidc_token():
    docs = {name: load(text) for name, text in workflow_texts().items()}
    assert permission_problems(docs, deploy_path().name) == []


def test_dependabot_keeps_actions_and_locked_packages_current():
    assert dependabot_problems(yaml.safe_load(DEPENDABOT.read_text())) == []


def test_package_json_keeps_the_cdktn_cli_where_npm_ci_installs_it():
    # `npm ci --ignore-scripts` is enough: no locked package needs an install script, and the CLI is locked.
    package = json.loads((ROOT / "package.json").read_text())
    lock = json.loads((ROOT / "package-lock.json").read_text())
    assert "cdktn-cli" in {**package.get("dependencies", {}), **package.get("devDependencies", {})}
    assert [name for name, p in lock["packages"].items() if p.get("hasInstallScript")] == []


@pytest.fixture(scope="module")
def scratch_repo(tmp_path_factory) -> Path:
    if shutil.which("git") is None:
        pytest.skip("needs git")
    return tmp_path_factory.mktemp("gitignore") / "repo"


def test_gitignore_keeps_state_plans_and_credentials_out(scratch_repo):
    assert ignore_problems((ROOT / ".gitignore").read_text(), scratch_repo) == []
    if (ROOT / ".git").exists():  # and in this checkout, with every .gitignore it has (read-only)
        assert _check_ignore(ROOT) == []


# --- each rule fails on a broken copy -----------------------------------------------------------------------

SHA = re.compile(r"@[0-9a-f]{40}")

PIN_MUTATIONS: dict[str, Callable[[str], str]] = {
    "tag pin": lambda t: SHA.sub("@v3", t, count=1),
    "auth by tag": lambda t: re.sub(r"(google-github-actions/auth)@[0-9a-f]{40}", r"\1@v3", t),
    "short sha": lambda t: SHA.sub(lambda m: m.group(0)[:8], t, count=1),
    "branch pin": lambda t: SHA.sub("@main", t, count=1),
    "no tag comment": lambda t: re.sub(r"(@[0-9a-f]{40}) # v[\d.]+", r"\1", t, count=1),
    "comment not a tag": lambda t: re.sub(r"(@[0-9a-f]{40}) # v[\d.]+", r"\1 # pinned", t, count=1),
    "comment on another line": lambda t: re.sub(r"(\n *)(- )?uses: (\S+) (# v[\d.]+)", r"\1# \4\1\2uses: \3",
                                               t, count=1),
}


@pytest.mark.parametrize(("name", "mutation"), [(name, mutation) for name in ("ci.yml", "deploy.yml")
                                               for mutation in sorted(PIN_MUTATIONS)
                                               if name == "deploy.yml" or mutation != "auth by tag"])
def test_the_pin_rule_catches(name, mutation):
    text = (WORKFLOWS / name).read_text()
    broken = PIN_MUTATIONS[mutation](text)
    assert broken != text
    assert pin_problems(broken)


def _move(doc: dict, prefix: str, to: int) -> dict:
    job = next(iter(doc["jobs"].values()))
    i = next(i for i, s in enumerate(job["steps"]) if s.get("uses", "").startswith(prefix))
    job["steps"].insert(to, job["steps"].pop(i))
    return doc


def _install(doc: dict) -> dict:
    return next(s for s in steps(doc) if INSTALLS.search(s.get("run", "")))


def _set_install(run: Callable[[str], str]) -> Callable[[dict], dict]:
    def mutate(doc: dict) -> dict:
        step = _install(doc)
        step["run"] = run(step["run"])
        return doc
    return mutate


def _terraform(**with_) -> Callable[[dict], dict]:
    def mutate(doc: dict) -> dict:
        step = next(s for s in steps(doc) if s.get("uses", "").startswith(SETUP_TERRAFORM))
        step["with"] = {**step.get("with", {}), **with_}
        step["with"] = {k: v for k, v in step["with"].items() if v is not None}
        return doc
    return mutate


def _add_step(index: int, step: dict) -> Callable[[dict], dict]:
    def mutate(doc: dict) -> dict:
        next(iter(doc["jobs"].values()))["steps"].insert(index if index >= 0 else len(steps(doc)), step)
        return doc
    return mutate


def _replace(old: str, new: str) -> Callable[[dict], dict]:
    return _set_install(lambda run: run.replace(old, new))


AFTER_AUTH = "installs packages after"
EXACT = "exact X.Y.Z"
PROD_ONLY = "`prod` stack only"
# mutation: (words of the problem it must cause, the mutation)
DEPLOY_MUTATIONS: dict[str, tuple[str, Callable[[dict], dict]]] = {
    "auth before the install": (AFTER_AUTH, lambda d: _move(d, AUTH, 2)),
    "auth first": (AFTER_AUTH, lambda d: _move(d, AUTH, 0)),
    "setup-terraform after auth": ("setup-terraform runs after", lambda d: _move(d, SETUP_TERRAFORM, 99)),
    "make deps": ("dev packages", _set_install(lambda run: "make deps")),
    "pipenv sync --dev": ("dev packages", _replace("pipenv sync", "pipenv sync --dev")),
    "pipenv install": ("from the lock", _replace("pipenv sync", "pipenv install")),
    "install scripts on": ("--ignore-scripts", _replace(" --ignore-scripts", "")),
    "npm install": ("--ignore-scripts", _replace("npm ci", "npm install")),
    "npm ci without dev": ("leaves out devDependencies", _replace("npm ci", "npm ci --omit=dev")),
    "an install after auth": (AFTER_AUTH, _add_step(-1, {"run": "python3 -m pip install requests"})),
    "terraform unpinned": (EXACT, _terraform(terraform_version=None)),
    "terraform range": (EXACT, _terraform(terraform_version="~1.15.0")),
    "terraform minor only": (EXACT, _terraform(terraform_version="1.15")),
    "terraform latest": (EXACT, _terraform(terraform_version="latest")),
    "terraform wrapper": ("terraform_wrapper", _terraform(terraform_wrapper=None)),
    "deploys bootstrap": (PROD_ONLY, _add_step(-1, {"run": "npx cdktn deploy prod-bootstrap"})),
    "deploys every stack": (PROD_ONLY, _add_step(-1, {"run": "npx cdktn deploy '*' --auto-approve"})),
}


@pytest.mark.parametrize("mutation", sorted(DEPLOY_MUTATIONS))
def test_the_deploy_rule_catches(mutation):
    doc = load(deploy_path().read_text())
    words, mutate = DEPLOY_MUTATIONS[mutation]
    broken = mutate(copy.deepcopy(doc))
    assert broken != doc
    problems = deploy_problems(broken)
    assert any(words in problem for problem in problems), problems


def test_the_deploy_rule_reads_the_text_not_only_the_structure():
    """The same order check, on the workflow text with the auth step moved above the install step."""
    text = deploy_path().read_text()
    blocks = re.split(r"\n(?=      - )", text)
    auth = next(i for i, b in enumerate(blocks) if AUTH in b)
    install = next(i for i, b in enumerate(blocks) if "pipenv sync" in b)
    assert install < auth
    blocks.insert(install, blocks.pop(auth))
    assert "after the job authenticated" in " ".join(deploy_problems(load("\n".join(blocks))))


TRIGGER_MUTATIONS: dict[str, Callable[[dict], dict]] = {
    "pull_request": lambda d: {**d, "on": {**d["on"], "pull_request": None}},
    "no workflow_dispatch": lambda d: {**d, "on": {"push": d["on"]["push"]}},
    "another branch": lambda d: {**d, "on": {**d["on"], "push": {"branches": [DEPLOY_BRANCH, "dev"]}}},
    "any branch": lambda d: {**d, "on": {**d["on"], "push": None}},
    "tags too": lambda d: {**d, "on": {**d["on"], "push": {"branches": [DEPLOY_BRANCH], "tags": ["v*"]}}},
    "bare push": lambda d: {**d, "on": "push"},
}


@pytest.mark.parametrize("mutation", sorted(TRIGGER_MUTATIONS))
def test_the_trigger_rule_catches(mutation):
    _, events = ci_identity_constants()
    doc = load(deploy_path().read_text())
    assert trigger_problems(TRIGGER_MUTATIONS[mutation](copy.deepcopy(doc)), events)


def test_the_yaml_on_key_is_read_as_the_triggers():
    assert load("on:\n  push:\njobs: {}\n")["on"] == {"push": None}


PERMISSION_MUTATIONS: dict[str, Callable[[dict], None]] = {
    "ci mints tokens": lambda docs: docs["ci.yml"]["permissions"].update({"id-token": "write"}),
    "a ci job mints tokens": lambda docs: next(iter(docs["ci.yml"]["jobs"].values())).update(
        permissions={"id-token": "write"}),
    "ci write-all": lambda docs: docs["ci.yml"].update(permissions="write-all"),
    "ci writes contents": lambda docs: docs["ci.yml"]["permissions"].update({"contents": "write"}),
    "ci no permissions": lambda docs: docs["ci.yml"].pop("permissions"),
    "deploy writes contents": lambda docs: docs["deploy.yml"]["permissions"].update({"contents": "write"}),
    "a third workflow mints tokens": lambda docs: docs.update(
        {"release.yml": {"permissions": {"id-token": "write"}, "jobs": {"x": {"steps": []}}}}),
}


@pytest.mark.parametrize("mutation", sorted(PERMISSION_MUTATIONS))
def test_the_permission_rule_catches(mutation):
    docs = {name: load(text) for name, text in workflow_texts().items()}
    PERMISSION_MUTATIONS[mutation](docs)
    assert permission_problems(docs, deploy_path().name)


@pytest.mark.parametrize("ecosystem", ["github-actions", "pip", "npm"])
def test_the_dependabot_rule_catches_a_missing_ecosystem(ecosystem):
    doc = yaml.safe_load(DEPENDABOT.read_text())
    doc["updates"] = [u for u in doc["updates"] if u["package-ecosystem"] != ecosystem]
    assert dependabot_problems(doc)


@pytest.mark.parametrize("pattern", ["*.tfstate", "*.tfstate.*", "*.tfplan", "crash.log", "crash.*.log",
                                     "gha-creds-*.json", ".env", "!.env.example"])
def test_the_ignore_rule_catches_a_missing_pattern(pattern, scratch_repo):
    lines = (ROOT / ".gitignore").read_text().splitlines()
    assert pattern in lines
    assert ignore_problems("\n".join(line for line in lines if line != pattern) + "\n", scratch_repo)
