"""``python -m serving``: see serving/__init__.py."""

from serving.cli import run

run()
