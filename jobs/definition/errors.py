"""The jobs layer's errors: one family (FieldError), one way of writing them (render).

Every refusal names where (a file, when known, and a field path), what is wrong and what is allowed; the
narrower types (a study's, the schema's, the build context's, --local's) only say which check refused, and
become a JobError, the one that reaches run_job.py, through ``to_job_error`` with the words unchanged.
"""

from __future__ import annotations


def render(file: str | None, path: str, problem: str, allowed: str = "") -> str:
    """``[<file>: ]<field.path>: <problem>[; allowed: <allowed>]`` on exactly one line."""
    text = f"{path}: {problem}" if file is None else f"{file}: {path}: {problem}"
    if allowed:
        text += f"; allowed: {allowed}"
    # One line, whatever the pieces contain (YAML snippets, proto messages with newlines).
    return printable(" ".join(text.split()))


def printable(text: str, keep: str = "") -> str:
    """``text`` with every character that could rewrite a terminal (control codes, bidi overrides from a
    hostile file or a job's log) escaped, except those in ``keep``."""
    return "".join(c if c.isprintable() or c in keep else _escape(c) for c in text)


class FieldError(ValueError):
    """A refusal: ``path`` names the field, ``file`` the file when known (None: not yet)."""

    def __init__(self, path: str, problem: str, allowed: str = "", file: str | None = None) -> None:
        self.file = None if file is None else str(file)
        self.path, self.problem, self.allowed = path, problem, allowed
        super().__init__(self.__str__())

    def __str__(self) -> str:
        return render(self.file, self.path, self.problem, self.allowed)

    def to_job_error(self, file: str | None = None, path: str | None = None) -> JobError:
        """The same words as a JobError, in ``file`` (else its own) at ``path`` (else its own)."""
        where = self.path if path is None else path
        return JobError(file or self.file or "", where, self.problem, self.allowed)


class JobError(FieldError):
    """Bad input in a job definition, an override or the environment.

    str() is exactly one line: ``<file>: <field.path>: <problem>; allowed: <allowed>``, which is what
    run_job.py prints before exiting with status 2.
    """

    def __init__(self, file: str, path: str, problem: str, allowed: str = "") -> None:
        super().__init__(path or "(top level)", problem, allowed, file=str(file))

    def at(self, file: str | None = None, path: str | None = None) -> JobError:
        """The same error re-addressed (the file once known, or a body path translated to the file's)."""
        return self.to_job_error(file, path)


def _escape(char: str) -> str:
    return char.encode("unicode_escape").decode("ascii")


def one_of(values) -> str:
    """Render a set of allowed values for the 'allowed:' part of an error."""
    values = [str(v) for v in values]
    if len(values) > 12:
        values = values[:12] + [f"... ({len(values) - 12} more)"]
    return ", ".join(values)
