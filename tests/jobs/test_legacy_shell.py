"""The bit of POSIX shell `run_job.py convert` reads submit scripts with (jobs/legacy/shell.py).

Each row is a script and the words its last command expands to, as `sh` would give them; `?<reason>` marks a
part only the running script knows (what the converter then refuses to guess), with the variable to set
behind it. The rows are the constructs the Google Cloud samples' submit scripts use.
"""

from __future__ import annotations

import pytest

from jobs.legacy import shell


def last_command(text: str, variables: dict[str, str] | None = None) -> list[str]:
    command = shell.parse(text, variables).commands[-1]
    return [
        "".join(p if isinstance(p, str) else f"?{p.reason}[{p.name}]" for p in word.parts)
        for word in command.words
    ]


CASES = [
    # assignments, quotes, continuations
    ("A=1 ; B='x y'\necho $A \"$B\" '$A'", ["echo", "1", "x y", "$A"]),
    ("A=1; echo $A", ["echo", "1"]),  # a statement sees the one before it on the same line
    ("export A=b\\\n  C=d\necho $A$C", ["echo", "bd"]),
    ('echo "a\\"b" a\\ b', ["echo", 'a"b', "a b"]),
    # field splitting: unquoted expansions split at blanks, empty ones vanish; quoted ones stay one word
    ('F="--a 1  --b 2"\necho $F "$F"', ["echo", "--a", "1", "--b", "2", "--a 1  --b 2"]),
    ('E=\necho x $E ${E} "$E" y', ["echo", "x", "", "y"]),
    ('F="a b"\nG=$F\necho "$G" x$F', ["echo", "a b", "xa", "b"]),  # assignments do not split
    # defaults: expanded in turn, nested, for unset (-) or also empty (:-)
    ("E=\necho ${E-u} ${E:-e} ${U:-x ${V:-y}}", ["echo", "e", "x", "y"]),
    (
        "P=${P:-$(gcloud config get-value project)}\necho gcr.io/$P/img",
        ["echo", "gcr.io/?a command substitution[P]/img"],
    ),
    # what only the running script knows, and the variable to set for it
    (
        "echo $NOPE ${NOPE2}",
        ["echo", "?not assigned in the script[NOPE]", "?not assigned in the script[NOPE2]"],
    ),
    ("D=$(date +%s)\nX=run_$D\necho $X", ["echo", "run_?a command substitution[D]"]),
    ("echo `date` $1", ["echo", "?a command substitution[]", "?a script argument or shell parameter[]"]),
    ("N=2\necho $((N - 1))", ["echo", "?an arithmetic expansion[]"]),
    # branches: a value is known inside its own branch only
    ('if [ -n "$G" ]; then T=gpu; echo $T; fi', ["echo", "gpu"]),
    ('T=cpu\nif [ -n "$G" ]; then T=gpu\nelse echo $T\nfi', ["echo", "cpu"]),
    ("if x; then\n  T=gpu\nfi\necho $T", ["echo", "?assigned inside `if` (line 1)[T]"]),
    ("for i in 1 2; do\n  N=$i\ndone\necho $N", ["echo", "?assigned inside `for` (line 1)[N]"]),
    ("case $M in\n  a) T=1 ;;\n  b) echo $T ;;\nesac", ["echo", "?not assigned in the script[T]"]),
    ("case $M in\n  a) T=1 ;;\nesac\necho $T", ["echo", "?assigned inside `case` (line 1)[T]"]),
    ("run() {\n  T=1\n}\necho $T", ["echo", "?assigned inside a function (line 1)[T]"]),
    ("if a; then if b; then T=1; fi; fi\nT=2\necho $T", ["echo", "2"]),
]


@pytest.mark.parametrize("text, words", CASES, ids=[str(i) for i in range(len(CASES))])
def test_words_expand_as_sh_would(text, words):
    assert last_command(text) == words


def test_a_given_variable_is_fixed_whatever_the_script_assigns():
    text = "P=$(gcloud config get-value project)\nif a; then P=x; fi\necho $P ${P:-d} $Q"
    assert last_command(text, {"P": "demo", "Q": "q"}) == ["echo", "demo", "demo", "q"]


@pytest.mark.parametrize(
    "text, problem",
    [
        ("echo 'a", "unterminated ' quote"),
        ("echo $(date", "unterminated $("),
        ("echo ${A", "unterminated ${"),
    ],
)
def test_unterminated_constructs_name_their_line(text, problem):
    with pytest.raises(shell.ShellError) as error:
        shell.parse("true\n" + text)
    assert error.value.line == 2 and problem in error.value.problem
