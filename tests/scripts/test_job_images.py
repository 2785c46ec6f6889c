"""scripts/job_images.py: the per-job report of image, TensorFlow and validation verdict."""

from __future__ import annotations

from tests.jobs.helpers import REPO_ROOT, SHIPPED, run_script


def test_every_shipped_job_passes_and_names_its_tensorflow(script_env):
    proc = run_script([], script_env, script="job_images.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [line.split() for line in proc.stdout.splitlines()[1:]]
    assert {row[0] for row in rows} == {p.stem for p in SHIPPED}
    by_job = {row[0]: row for row in rows}
    assert by_job["census_tpu"][3] == "2.20.0" and by_job["census_cpu"][3] == "2.21.0"
    assert by_job["census_prebuilt"][2].startswith("tf-cpu.2-17") and by_job["census_prebuilt"][3:5] == [
        "tf",
        "2.17",
    ]
    assert all(row[-1] == "pass" for row in rows)


def test_a_job_on_an_image_the_trainer_cannot_run_fails(script_env, tmp_path):
    old = tmp_path / "old.yaml"
    old.write_text(
        (REPO_ROOT / "jobs/census_prebuilt.yaml").read_text().replace("tf-cpu.2-17", "tf-cpu.2-15")
    )
    proc = run_script([old], script_env, script="job_images.py")
    assert proc.returncode == 1
    assert "FAIL" in proc.stdout and "TensorFlow 2.15 (Keras 2)" in proc.stdout


def test_an_unknown_environment_is_one_line_exit_2(script_env):
    proc = run_script(["--env", "nope"], script_env, script="job_images.py")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip() == "job_images.py: --env: unknown environment 'nope'; allowed: dev, prod"
