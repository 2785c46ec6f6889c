"""The one error type of the jobs layer: a single line naming the file, the field path and what is allowed."""

from __future__ import annotations


class JobError(ValueError):
    """Bad input in a job definition, an override or the environment.

    str() is exactly one line: ``<file>: <field.path>: <problem>; allowed: <allowed>``, which is what
    run_job.py prints before exiting with status 2.
    """

    def __init__(self, file: str, path: str, problem: str, allowed: str = "") -> None:
        self.file = str(file)
        self.path = path or "(top level)"
        self.problem = problem
        self.allowed = allowed
        super().__init__(self.__str__())

    def __str__(self) -> str:
        text = f"{self.file}: {self.path}: {self.problem}"
        if self.allowed:
            text += f"; allowed: {self.allowed}"
        # One line, whatever the pieces contain (YAML snippets, proto messages with newlines), and no
        # character that could rewrite the terminal (control codes, bidi overrides from a hostile file).
        return "".join(c if c.isprintable() else _escape(c) for c in " ".join(text.split()))

    def at(self, file: str | None = None, path: str | None = None) -> JobError:
        """The same error re-addressed (the file once known, or a body path translated to the file's)."""
        return JobError(file or self.file, self.path if path is None else path, self.problem, self.allowed)


def _escape(char: str) -> str:
    return char.encode("unicode_escape").decode("ascii")


def one_of(values) -> str:
    """Render a set of allowed values for the 'allowed:' part of an error."""
    values = [str(v) for v in values]
    if len(values) > 12:
        values = values[:12] + [f"... ({len(values) - 12} more)"]
    return ", ".join(values)
