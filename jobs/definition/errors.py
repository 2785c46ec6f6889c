"""The jobs layer's errors: one family (FieldError), one way of writing them (render).

Every refusal names where (a file, when known, and a field path), what is wrong and what is allowed; the
narrower types (a study's, the schema's, the build context's, --local's) only say which check refused, and
become a JobError, the one that reaches run_job.py, through ``to_job_error`` with the words unchanged.

A refusal that repeats a value the user gave (a flag, a --set, a field of a file, a resource name) shows it
through ``short``, so a 100 KB value still makes one readable line.
"""

from __future__ import annotations

# A value whose repr is longer than this is shown by its start and its length: a 100 KB flag, a field of
# newlines, still make one readable line. Resource names, URIs and emails of real jobs fit whole.
SHORT = 100
# File names and field paths are shown whole up to here: longer ones are a user's value (a --set path, a path
# as long as the system allows), not a name of this repo.
SHORT_NAME = 200
# How much of a value too long to show whole is shown.
HEAD = 60


def short(value: object, limit: int = SHORT, *, quote: bool = True) -> str:
    """``value`` as an error line repeats it: its repr (``quote``) or its text, whole when that fits in
    ``limit`` characters, else the start that fits in ``HEAD`` (less for a small limit) and the length, e.g.
    ``'aaaaaaaa'... (100000 characters)``."""
    text = value if isinstance(value, str) else repr(value)
    shown = repr if quote and isinstance(value, str) else printable  # what one character costs on the line
    if len(shown(text)) <= limit:
        return repr(value) if quote else text
    budget = max(min(HEAD, limit - 20), 8)
    head = text[:budget]
    while len(shown(head)) > budget + 2:  # escapes (\x1b, \n) cost several characters each
        head = head[:-1]
    return f"{shown(head)}... ({len(text)} characters)"


def render(file: str | None, path: str, problem: str, allowed: str = "") -> str:
    """``[<file>: ]<field.path>: <problem>[; allowed: <allowed>]`` on exactly one line."""
    text = f"{short(path, SHORT_NAME, quote=False)}: {problem}"
    if file is not None:
        text = f"{short(file, SHORT_NAME, quote=False)}: {text}"
    if allowed:
        text += f"; allowed: {allowed}"
    return one_line(text)


def one_line(text: str) -> str:
    """``text`` on one line, whatever it contains (YAML snippets, proto messages with newlines, a user's
    value), and with nothing that could rewrite a terminal."""
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
