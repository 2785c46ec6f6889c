"""Hostile paths given to the local executor: each is one line naming the field, exit status 2, and nothing
written, inside the local root or outside it. gs:// URIs that climb out of the root, symlinks inside the root
that point out of it, --local-root paths that are not usable directories, what exec or SQLite cannot take."""

import copy
import json
import os

import pytest

from jobs.local import environment, launcher, spec
from jobs.local.run import _registry, run_local
from jobs.local.spec import LocalRunError
from tests.jobs.local.helpers import (
    OUTPUTS,
    PARAMS,
    REPO_ROOT,
    custom_job,
    job_spec,
    pool,
    refused,
    tuning_job,
)

ESCAPE = "gs://demo-models/../../../escaped"  # <root>/gs/demo-models/../../.. is tmp_path: lands beside root
DUMPS = "--dump-dir=gs://demo-models/dumps"


def _categorical(value):
    params = copy.deepcopy(PARAMS)
    params[2]["categoricalValueSpec"]["values"] = ["a", value]
    return params


# -- 1. gs:// URIs that would resolve above the local root


ESCAPING_URIS = [
    ("base", custom_job(pool([DUMPS]), base=ESCAPE), "jobSpec.baseOutputDirectory.outputUriPrefix"),
    (
        "trial base",
        tuning_job([DUMPS]) | {"trialJobSpec": job_spec(pool([DUMPS]), base=ESCAPE)},
        "trialJobSpec.baseOutputDirectory.outputUriPrefix",
    ),
    (
        "data arg",
        custom_job(pool([DUMPS, f"--data={ESCAPE}"])),
        "jobSpec.workerPoolSpecs.0.pythonPackageSpec.args",
    ),
    (
        "second item of a comma list",
        custom_job(pool([DUMPS, f"--data=gs://demo-data/a.csv,{ESCAPE}"])),
        "jobSpec.workerPoolSpecs.0.pythonPackageSpec.args",
    ),
    (
        "path going on after a colon",
        custom_job(pool([DUMPS, "--data=gs://demo-data/x:/../../../../escaped"])),
        "jobSpec.workerPoolSpecs.0.pythonPackageSpec.args",
    ),
    (
        "worker pool arg",
        custom_job(pool([DUMPS]), pool([DUMPS, ESCAPE])),
        "jobSpec.workerPoolSpecs.1.pythonPackageSpec.args",
    ),
    (
        "env value",
        custom_job(pool([DUMPS], env={"EXTRA_VAR": ESCAPE})),
        "jobSpec.workerPoolSpecs.0.pythonPackageSpec.env",
    ),
    ("bucket '..'", custom_job(pool([DUMPS, "--data=gs://../escaped"])), "pythonPackageSpec.args"),
    ("no bucket", custom_job(pool([DUMPS, "--data=gs:///escaped"])), "pythonPackageSpec.args"),
    ("'.' segment", custom_job(pool([DUMPS]), base="gs://demo-models/./x"), "outputUriPrefix"),
    (
        "tuned categorical value",
        tuning_job([DUMPS], params=_categorical(ESCAPE)),
        "studySpec.parameters.2.categoricalValueSpec.values",
    ),
]


@pytest.mark.parametrize(("body", "field"), [c[1:] for c in ESCAPING_URIS], ids=[c[0] for c in ESCAPING_URIS])
def test_gs_uris_that_leave_the_local_root_are_refused_before_anything_is_written(
    body, field, tmp_path, capsys
):
    err = refused(body, tmp_path, capsys)
    assert field in err and ("'..'" in err or "no bucket" in err), err


def test_a_data_bucket_that_leaves_the_local_root_is_refused(tmp_path, capsys):
    err = refused(custom_job(pool([DUMPS])), tmp_path, capsys, outputs=OUTPUTS | {"data_bucket": "gs://.."})
    assert "data_bucket" in err and "no bucket" in err


@pytest.mark.parametrize(
    ("value", "mapped"),
    [
        ("gs://b/data/*.csv", "{gs}/b/data/*.csv"),
        ("--files=gs://b/a.csv,gs://c/d/", "--files={gs}/b/a.csv,{gs}/c/d/"),
        ("gs://b", "{gs}/b"),
        ("gs://b/x..y/.hidden", "{gs}/b/x..y/.hidden"),
        ("no uri at all", "no uri at all"),
    ],
)
def test_the_gate_maps_ordinary_uris_unchanged(value, mapped, tmp_path):
    assert environment.to_local(value, tmp_path, "f") == mapped.format(gs=tmp_path / "gs")
    assert not (tmp_path / "gs").exists()


# -- 1. symlinks inside the root that point out of it


SYMLINKS = [
    # (what is a symlink to the outside folder, the body, the field the error names)
    ("gs/demo-models", custom_job(pool([DUMPS])), "jobSpec.workerPoolSpecs.0.pythonPackageSpec.args"),
    ("gs/demo-models/runs", custom_job(pool(["--dump-dir=gs://demo-data/d"])), "outputUriPrefix"),
    ("gs/demo-data", custom_job(pool(["--dump-dir=gs://demo-models/d"])), "data_bucket"),
    ("gs/demo-data/census/adult.data", custom_job(pool(["--dump-dir=gs://demo-models/d"])), "data_bucket"),
    (
        "gs/demo-models/runs/job-1/replica-logs",
        custom_job(pool(["--dump-dir=gs://demo-data/d"])),
        "outputUriPrefix",
    ),
    (
        "gs/demo-models/runs/job-1/hypertune",
        custom_job(pool(["--dump-dir=gs://demo-data/d"])),
        "outputUriPrefix",
    ),
    (
        "gs/demo-models/runs/job-1/checkpoints",
        custom_job(pool(["--dump-dir=gs://demo-data/d"])),
        "outputUriPrefix",
    ),
    ("runs", custom_job(pool(["--dump-dir=gs://demo-data/d"]), base=""), "--local-root"),
    ("gs/demo-models/runs/study-1/3", tuning_job(["--dump-dir=gs://demo-data/d"]), "trialJobSpec.baseOutput"),
    (
        "gs/demo-models/runs/study-1/study.json",
        tuning_job(["--dump-dir=gs://demo-data/d"]),
        "trialJobSpec.base",
    ),
    ("studies", tuning_job(["--dump-dir=gs://demo-data/d"]), "--local-root"),
]


@pytest.mark.parametrize(("link", "body", "field"), SYMLINKS, ids=[s[0] for s in SYMLINKS])
def test_symlinks_inside_the_root_pointing_outside_are_refused(link, body, field, tmp_path, capsys):
    root, outside = tmp_path / "root", tmp_path / "outside"
    outside.mkdir()
    (root / link).parent.mkdir(parents=True)
    (root / link).symlink_to(outside / "target")  # dangling: what follows it would create the target
    err = refused(body, tmp_path, capsys, root=root)
    assert field in err and f"resolves to {outside}" in err and "outside the local root" in err, err
    assert not list(outside.iterdir())


def test_symlinks_that_stay_inside_the_root_are_fine(tmp_path, capsys):
    root = tmp_path / "root"
    (root / "elsewhere").mkdir(parents=True)
    (root / "gs").mkdir()
    (root / "gs/demo-models").symlink_to(root / "elsewhere")
    assert (
        run_local("CustomJob", custom_job(pool([DUMPS])), OUTPUTS, repo_root=REPO_ROOT, local_root=root) == 0
    )
    assert (root / "elsewhere/runs/job-1/model/saved_model.pb").exists()


def test_a_resume_record_pointing_outside_the_root_is_refused(tmp_path, capsys):
    root, outside = tmp_path / "root", tmp_path / "outside"
    body = tuning_job(["--dump-dir=gs://demo-data/d"], base="gs://demo-models/runs/new")
    record = _registry(root, body["studySpec"])
    record.parent.mkdir(parents=True)
    record.write_text(json.dumps({"base": str(outside)}))
    err = refused(body, tmp_path, capsys, root=root, resume=True)
    assert err.startswith("error: local run: --resume:") and "outside the local root" in err
    record.write_text("{not json")
    err = refused(body, tmp_path, capsys, root=root, resume=True)
    assert "--resume" in err and "unreadable" in err


def test_the_launcher_checks_each_trial_folder_again_before_it_makes_or_starts_anything(tmp_path):
    # A symlink planted while a study runs is caught when the trial using it starts.
    root, outside = tmp_path / "root", tmp_path / "outside"
    outside.mkdir()
    (root / "base").mkdir(parents=True)
    (root / "base/7").symlink_to(outside)
    job = spec.parse_job_spec(job_spec(pool(["--dump-dir=gs://demo-data/d"])), "trialJobSpec")
    with pytest.raises(LocalRunError, match="trialJobSpec.baseOutputDirectory: .*outside the local root"):
        launcher.start_job(
            job,
            run_dir=root / "base/7/replica-logs",
            base_local=root / "base",
            local_root=root,
            repo_root=REPO_ROOT,
            trial_id="7",
            field="trialJobSpec.baseOutputDirectory",
        )
    assert not list(outside.iterdir()) and not (root / "gs").exists()


# -- 3. --local-root that is not a usable directory


def _fifo(path):
    os.mkfifo(path)


def _file(path):
    path.write_text("a file")


def _dangling(path):
    path.symlink_to(path.parent / "gone")


def _read_only(path):
    path.mkdir()
    path.chmod(0o555)


def _under_a_file(path):
    path.parent.write_text("a file")


UNUSABLE_ROOTS = [
    # (the --local-root, how to make it, what the error says)
    ("file", _file, "is a regular file"),
    ("fifo", _fifo, "is a FIFO"),
    ("dangling", _dangling, "is a dangling symlink"),
    ("read-only", _read_only, "is not writable"),
    ("missing/leaf", lambda path: None, "neither does its parent"),
    ("file/leaf", _under_a_file, "Not a directory"),
]


@pytest.mark.parametrize(("name", "make", "says"), UNUSABLE_ROOTS, ids=[r[0] for r in UNUSABLE_ROOTS])
def test_an_unusable_local_root_is_one_line_before_anything_is_written(
    name, make, says, tmp_path, capsys, owner_permissions
):
    (tmp_path / "roots").mkdir()
    root = tmp_path / "roots" / name
    make(root)
    err = refused(custom_job(pool([DUMPS])), tmp_path, capsys, root=root)
    assert err.startswith(f"error: local run: --local-root: {root}") and says in err, err


def test_a_device_is_not_a_local_root(tmp_path, capsys):
    err = refused(custom_job(pool([DUMPS])), tmp_path, capsys, root=os.devnull)
    assert "--local-root: /dev/null is a character device" in err


def test_a_read_only_parent_cannot_hold_a_new_local_root(tmp_path, capsys, owner_permissions):
    parent = tmp_path / "parent"
    _read_only(parent)
    err = refused(custom_job(pool([DUMPS])), tmp_path, capsys, root=parent / "root")
    assert "--local-root" in err and f"its parent {parent} is not writable" in err


def test_a_new_leaf_or_a_symlink_to_a_directory_is_a_usable_local_root(tmp_path):
    for root in (tmp_path / "new", tmp_path / "link"):
        if root.name == "link":
            (tmp_path / "real").mkdir()
            root.symlink_to(tmp_path / "real")
        body = custom_job(pool([DUMPS]))
        assert run_local("CustomJob", body, OUTPUTS, repo_root=REPO_ROOT, local_root=root) == 0
        assert (root / "gs/demo-models/runs/job-1/model/saved_model.pb").exists()


# -- other hostile input the runner meets before exec or SQLite


OTHER = [
    (
        "local path as base",
        custom_job(pool([DUMPS]), base="/tmp/elsewhere"),
        "outputUriPrefix: '/tmp/elsewhere'",
    ),
    ("relative base", custom_job(pool([DUMPS]), base="runs/x"), "is not a gs:// URI"),
    ("env name with '='", custom_job(pool([DUMPS], env={"A=B": "1"})), "pythonPackageSpec.env.0.name: 'A=B'"),
    ("NUL in env", custom_job(pool([DUMPS], env={"A": "x\0y"})), "pythonPackageSpec.env.0.value"),
    ("NUL in an arg", custom_job(pool([DUMPS, "--x=\0"])), "pythonPackageSpec.args: '--x=\\x00' holds a NUL"),
]


@pytest.mark.parametrize(("body", "says"), [o[1:] for o in OTHER], ids=[o[0] for o in OTHER])
def test_what_exec_or_the_gate_cannot_take_is_one_line(body, says, tmp_path, capsys):
    assert says in refused(body, tmp_path, capsys)


@pytest.mark.parametrize("folder", ["a?mode=ro", "a#b", "a%2Fb"])
def test_url_characters_in_a_study_folder_keep_its_database_inside_it(folder, tmp_path):
    body = tuning_job([DUMPS], trials=1, parallel=1, base=f"gs://demo-models/runs/{folder}")
    assert run_local("HyperparameterTuningJob", body, OUTPUTS, repo_root=REPO_ROOT, local_root=tmp_path) == 0
    runs = tmp_path / "gs/demo-models/runs"
    assert [p.name for p in runs.iterdir()] == [folder]
    assert (runs / folder / "study.db").is_file() and (runs / folder / "study.json").is_file()
