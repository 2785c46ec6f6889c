"""The trainer's content hash and sdist naming, and the light import of the Vertex AI message types."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap

from jobs.definition.package import code_hash, sdist_filename, source_files
from tests.jobs.helpers import REPO_ROOT


def make_repo(tmp_path):
    (tmp_path / "trainer").mkdir()
    (tmp_path / "trainer" / "__init__.py").write_text("")
    (tmp_path / "trainer" / "task.py").write_text("print('hi')\n")
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "My.Trainer"\nversion = "1.2.3"\n')
    return tmp_path


def test_code_hash_follows_content_not_metadata(tmp_path):
    repo = make_repo(tmp_path)
    first = code_hash(repo)
    assert len(first) == 16
    # Bytecode caches, egg-info and mtimes do not matter ...
    (repo / "trainer" / "__pycache__").mkdir()
    (repo / "trainer" / "__pycache__" / "task.cpython-311.pyc").write_bytes(b"\0")
    (repo / "trainer.egg-info").mkdir()
    (repo / "trainer" / "task.py").touch()
    assert code_hash(repo) == first
    # ... content, new files and renames do.
    (repo / "trainer" / "task.py").write_text("print('hello')\n")
    second = code_hash(repo)
    assert second != first
    (repo / "trainer" / "extra.py").write_text("")
    assert code_hash(repo) != second
    shutil.move(repo / "trainer" / "extra.py", repo / "trainer" / "other.py")
    assert [p.as_posix() for p in source_files(repo)] == [
        "pyproject.toml",
        "trainer/__init__.py",
        "trainer/other.py",
        "trainer/task.py",
    ]


def test_sdist_filename_is_what_setuptools_writes(tmp_path):
    assert sdist_filename(make_repo(tmp_path)) == "my_trainer-1.2.3.tar.gz"
    assert sdist_filename(REPO_ROOT) == "trainer-0.1.0.tar.gz"


def test_light_type_import_is_the_real_package():
    # After the light import, the full SDK still imports normally and shares the very same classes.
    script = textwrap.dedent("""\
        import sys
        from jobs.definition.vertex_types import job_message_classes
        custom, tuning = job_message_classes()
        assert "google.cloud.aiplatform_v1.services" not in sys.modules
        from google.cloud import aiplatform_v1
        from google.cloud.aiplatform_v1.services.job_service import JobServiceClient
        assert aiplatform_v1.CustomJob is custom and aiplatform_v1.HyperparameterTuningJob is tuning
        assert aiplatform_v1.types.CustomJob is custom
        request = aiplatform_v1.CreateCustomJobRequest(parent="projects/p/locations/l",
                                                       custom_job=custom(display_name="x"))
        assert request.custom_job.display_name == "x"
        print("ok")
        """)
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
