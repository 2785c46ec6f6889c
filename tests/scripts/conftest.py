"""The jobs layer's fixtures serve the run_job.py script tests too."""

from tests.jobs.conftest import cli, no_poll_sleep, script_env, write_job  # noqa: F401 - pytest fixtures
