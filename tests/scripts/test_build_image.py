"""scripts/build_image.py: the deploy workflow's image step, through the fake Cloud Build and Artifact
Registry."""

from __future__ import annotations

import io
import json

import pytest
import yaml

from jobs.cli.build_image import main
from jobs.definition.image import image_hash
from tests.jobs.fake_vertex import FakeVertex, FakeVertexServer
from tests.jobs.helpers import OUTPUTS, REPO_ROOT, make_repo

# Followed jobs and builds are polled without waiting (tests/jobs/conftest.py).
pytestmark = pytest.mark.usefixtures("no_poll_sleep")


def build(argv, **kwargs):
    out, err = io.StringIO(), io.StringIO()
    try:
        rc = main([str(a) for a in argv], out=out, err=err, **kwargs)
    except SystemExit as exc:
        rc = exc.code
    return rc, out.getvalue(), err.getvalue()


def test_print_tag_is_the_tag_run_job_uses():
    rc, out, err = build(["--print-tag"])
    assert rc == 0, err
    digest = image_hash(REPO_ROOT)
    assert json.loads(out) == {v: f"{v}-{digest}" for v in ("cpu", "gpu", "tpu")}


def test_builds_only_the_missing_variants(tmp_path):
    repo = make_repo(tmp_path / "repo")
    digest = image_hash(repo)
    fake = FakeVertex(tags=set())
    fake.add_image(f"{OUTPUTS['trainer_image']}:cpu-{digest}")
    with FakeVertexServer(fake) as server:
        rc, out, err = build([], outputs=OUTPUTS, repo_root=repo, factory=server.factory(tmp_path / "gcs"))
        assert rc == 0, err
        targets = [r.body["steps"][0]["args"][2] for r in fake.created_builds()]
        assert targets == ["gpu", "tpu"]
        # One context upload serves every variant of the same code.
        assert [p.name for p in (tmp_path / "gcs" / "demo-project-staging" / "builds").iterdir()] == [
            f"{digest}.tar.gz"
        ]
        rc, out, err = build([], outputs=OUTPUTS, repo_root=repo, factory=server.factory(tmp_path / "gcs"))
        assert rc == 0 and len(fake.created_builds()) == 2 and out.count("already built") == 3


def test_dry_run_touches_nothing_and_a_failed_build_exits_1(tmp_path):
    repo = make_repo(tmp_path / "repo")
    fake = FakeVertex(tags=set(), build_states=["QUEUED", "FAILURE"], build_detail="pip install failed")
    with FakeVertexServer(fake) as server:
        factory = server.factory(tmp_path / "gcs")
        rc, out, err = build(
            ["--dry-run", "--variant", "gpu"], outputs=OUTPUTS, repo_root=repo, factory=factory
        )
        assert rc == 0 and '"--target",\n' in err and '"gpu"' in err and fake.requests == []
        rc, out, err = build(["--variant", "gpu"], outputs=OUTPUTS, repo_root=repo, factory=factory)
    assert rc == 1 and err.count("\n") == 1
    assert "ended FAILURE: pip install failed; log: https://console.cloud.google.com/cloud-build/" in err


@pytest.mark.parametrize(
    "args, words",
    [(["--env", "nope"], "--env: unknown environment 'nope'"), (["--variant", "arm"], "invalid choice")],
)
def test_bad_input_is_one_line_exit_2(args, words, capsys):
    rc, out, err = build(args)
    err += capsys.readouterr().err  # argparse's usage errors go to sys.stderr
    assert rc == 2 and err.count("\n") == 1 and words in err, err


def test_the_deploy_workflow_builds_the_images_after_the_apply():
    doc = yaml.safe_load((REPO_ROOT / ".github/workflows/deploy.yml").read_text())
    runs = [step.get("run", "") for step in doc["jobs"]["deploy"]["steps"]]
    apply = next(i for i, r in enumerate(runs) if "cdktn deploy prod" in r)
    image = next(i for i, r in enumerate(runs) if "scripts/build_image.py" in r)
    assert image > apply
    assert "--env prod" in runs[image] and "--outputs-file .infra-outputs/prod.json" in runs[image]
