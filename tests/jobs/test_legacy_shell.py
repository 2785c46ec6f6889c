"""The bit of POSIX shell `run_job.py convert` reads submit scripts with (jobs/legacy/shell*.py).

Each row is a script and the words its last command expands to, as `sh` would give them; `?<reason>` marks a
part only the running script knows (what the converter then refuses to guess), with the variable to set
behind it. The rows are the constructs the Google Cloud samples' submit scripts use, then every way a script
changes a variable: followed exactly where sh's result is certain, else unknown with the construct and its
line, while the same construct on another variable leaves the one used alone. Here-documents are data.
"""

from __future__ import annotations

import pytest

from jobs.legacy import shell, shell_words


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
    # followed exactly: the order of a line's assignments, +=, :=, unset, prefixes, subshells, groups
    ("B=0\nB=1 C=$B\necho $C", ["echo", "1"]),
    ("B=a\nB+=b\nU+=c\necho $B $U", ["echo", "ab", "?not assigned in the script[U]c"]),
    (": ${R:=us} ${S=eu}\nT=x\n: ${T:=y}\necho $R $S $T", ["echo", "us", "eu", "x"]),
    ('B=old\nunset B\necho "$B" ${B-unset} ${B:-empty}', ["echo", "", "unset", "empty"]),
    ("B=old\nB=new echo $B\necho $B", ["echo", "old"]),  # a prefix is for its command only
    ("E=\nB=old\nB=new $E\necho $B", ["echo", "new"]),  # ... and there was none
    ("B=old\nB=new >/dev/null\necho $B", ["echo", "new"]),
    ("B=old\n(B=new; cd /tmp)\n( B=new )\necho $B", ["echo", "old"]),
    ("B=old\n{ B=new; }\necho $B", ["echo", "new"]),
    ("B=old\nexport -n B\nexport B\necho $B", ["echo", "old"]),
    ("export -n B=new\ndeclare -x C=c\necho $B $C", ["echo", "new", "c"]),
    ("set -- a b\necho $1", ["echo", "?a script argument or shell parameter[]"]),  # never guessed
    # IFS: unquoted expansions split at the script's IFS; one it cannot know splits nothing it can know
    ("IFS=,\nF='a b,,c,'\necho $F", ["echo", "a b", "", "c"]),
    ("IFS=\nF='a b'\necho $F", ["echo", "a b"]),
    ("IFS=' :'\nF='a: b'\necho $F", ["echo", "a", "b"]),
    ("IFS=, read -r A C\nF='a b'\necho $F", ["echo", "a", "b"]),  # IFS was for `read` only
    (
        "if x; then IFS=,; fi\nF='a b'\necho $F \"$F\"",
        ["echo", "?split at an IFS assigned inside `if` (line 1)[IFS]", "a b"],
    ),
    # a function's assignments may happen at each call
    (
        "f() { B=new; }\nB=again\nf\necho $B",
        ["echo", "?possibly set by `f` (line 3), the function of line 1[B]"],
    ),
    ("f() { C=new; }\nB=again\nf\necho $B", ["echo", "again"]),
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
    with pytest.raises(shell_words.ShellError) as error:
        shell.parse("true\n" + text)
    assert error.value.line == 2 and problem in error.value.problem


# A construct that changes B in a way convert does not follow, between `B=old` (line 1) and `echo $B`: B is
# unknown, and the reason names the construct and its line, as the converter's one-line refusal then does.
UNFOLLOWED = [
    (". ./vars.sh", "possibly set by `. ./vars.sh` (line 2)"),
    ("source ./vars.sh", "possibly set by `source ./vars.sh` (line 2)"),
    ("[ -f v.sh ] && . ./v.sh", "possibly set by `. ./v.sh` (line 2)"),
    ('eval "$(./env.sh)"', "possibly set by `eval $(./env.sh)` (line 2)"),
    (
        ". ./lib.sh\nB=again\nsetup",
        "possibly set by `setup` (line 4), a function `. ./lib.sh` (line 2) may define",
    ),
    ("read B", "set by `read B` (line 2)"),
    ("read -r -p prompt B", "set by `read -r -p prompt B` (line 2)"),
    ("IFS=, read -r A B", "set by `read -r A B` (line 2)"),
    ('read "$NAME"', "possibly set by `read $NAME` (line 2)"),  # which variable only the shell knows
    ("echo new | read B", "set by `read B` (line 2)"),
    ('[ -z "$X" ] && B=new', "assigned after `&&` (line 2)"),
    ('test -n "$X" || B=new', "assigned after `||` (line 2)"),
    ("cd /srv && export B=new", "assigned after `&&` (line 2)"),
    ('[ -n "$X" ] &&\n  B=new', "assigned after `&&` (line 3)"),
    ('[ -n "$X" ] && { B=new; }', "assigned after `&&` (line 2)"),
    ('[ -n "$X" ] && unset B', "unset after `&&` (line 2)"),
    ('unset "$NAME"', "possibly unset by `unset $NAME` (line 2)"),
    ("B=new | cat", "assigned in a pipeline (line 2)"),
    ("{ B=new; } | cat", "assigned in a pipeline (line 2)"),
    ("B=new &", "assigned in the background (line 2)"),
    ("B=new :", "assigned before `:` (line 2; sh keeps it, bash does not)"),
    ("declare -i B=1+1", "set by `declare -i B=1+1` (line 2)"),
    ("declare -i B\nB=2", "set by `declare -i B` (line 2)"),
    ("typeset -u B=new", "set by `typeset -u B=new` (line 2)"),
    ("declare -n R=B\nR=new", "possibly set through the nameref of `declare -n R=B` (line 2)"),
    ("readonly B\nB=new", "assigned after `readonly B` (line 2) made it read-only"),
    ("mapfile -t B < list", "set by `mapfile -t B < list` (line 2)"),
    ("readarray B", "set by `readarray B` (line 2)"),
    ("getopts ab: B", "set by `getopts ab: B` (line 2)"),
    ("printf -v B '%s' new", "set by `printf -v B %s new` (line 2)"),
    ("let B=1+1", "set by `let B=1+1` (line 2)"),
    ("let 'B += 1'", "set by `let B += 1` (line 2)"),
    ("(( B = 2 ))", "set by `(( B = 2 ))` (line 2)"),
    ("((B++))", "set by `((B++))` (line 2)"),
    (": $(( B = 2 ))", "set by `$(( B = 2 ))` (line 2)"),
    ("for B in a b; do :; done", "assigned inside `for` (line 2)"),
    ("for ((B = 0; B < 2; B++)); do :; done", "assigned inside `for` (line 2)"),
    ("select B in a b; do break; done", "assigned inside `select` (line 2)"),
    ("B=(a b)", "an array assignment (line 2)"),
    ("B=(\n  a\n  b\n)", "an array assignment (line 2)"),
    ("declare -a B=(a b)", "an array assignment (line 2)"),
    ("f() { B=new; }\nB=again\nf", "possibly set by `f` (line 4), the function of line 2"),
]


@pytest.mark.parametrize("construct, reason", UNFOLLOWED, ids=[c for c, _ in UNFOLLOWED])
def test_what_changes_a_variable_unfollowed_makes_it_unknown_naming_the_construct(construct, reason):
    assert last_command(f"B=old\n{construct}\necho $B") == ["echo", f"?{reason}[B]"]


def test_a_loop_variable_is_unknown_inside_the_loop():
    assert last_command("for B in a b; do\n  echo $B\ndone") == ["echo", "?set by `for` (line 1)[B]"]


# The same constructs where they leave B alone (another variable, a comparison, a prompt, a function body
# that sets no B), or set it in a way sh is certain of: B is known, so convert has nothing to refuse.
FOLLOWED = [
    ("unset UNUSED", "old"),
    ("unset -f B", "old"),
    ("read OTHER", "old"),
    ("read -p B OTHER", "old"),  # B is the prompt
    ('[ -z "$X" ] && OTHER=new', "old"),
    ("B=new && echo ok", "new"),  # the first of an and-list always runs
    ("B=new || true", "new"),
    ("cmd && export OTHER=new", "old"),
    (". ./vars.sh\nB=again\ngsutil cp a b", "again"),  # assigned after the file: its own value
    ('eval "$(./env.sh)"\nB=again', "again"),
    ("declare -i OTHER=1+1", "old"),
    ("declare -r OTHER=1", "old"),
    ("readonly B", "old"),
    ("(( OTHER = 1 ))", "old"),
    ("(( B > 1 && B <= 9 && B != 3 ))", "old"),
    ("let 'B == 1'", "old"),
    ("echo $(( B + 1 ))", "old"),
    ("printf '%s' B", "old"),
    ("getopts ab: OTHER", "old"),
    ("mapfile OTHER", "old"),
    ("for OTHER in a b; do :; done", "old"),
    ("OTHER=(a b)", "old"),
    ("B=new true", "old"),
    ("set -- new", "old"),
    ("f() { OTHER=1; }\nf", "old"),
    ("f() (B=new)\nf", "old"),  # a subshell body
]


@pytest.mark.parametrize("construct, value", FOLLOWED, ids=[c for c, _ in FOLLOWED])
def test_what_leaves_a_variable_alone_or_sets_it_surely_is_followed(construct, value):
    assert last_command(f"B=old\n{construct}\necho $B") == ["echo", value]


def test_a_given_variable_stays_fixed_through_a_sourced_file():
    # The caller says what the sourced file set: convert then needs nothing else from it.
    text = ". ./vars.sh\nread C\necho $B $C"
    assert last_command(text, {"B": "given", "C": "too"}) == ["echo", "given", "too"]


# Here-documents are data: the gcloud line and the assignment in the body are no command, whatever the
# delimiter's form; the line after the delimiter is the script again.
BODY = "gcloud ai-platform jobs submit training inside\nB=body\n"
HEREDOCS = [
    f"cat <<EOF\n{BODY}EOF\n",
    f"cat <<-EOF\n\t{BODY}\t\tEOF\n",  # <<- strips leading tabs, from the delimiter line too
    f"cat <<'EOF'\n{BODY}EOF\n",
    f'cat <<"EOF"\n{BODY}EOF\n',
    f"cat << EOF\n{BODY}EOF\n",
    f"cat <<\\EOF\n{BODY}EOF\n",
    f'cat <<E"O"F\n{BODY}EOF\n',
    f"cat <<EOF >out; cat <<'END'\n{BODY}EOF\n{BODY}END\n",  # two bodies, in order
    f"cat <<EOF\n{BODY}foo\\\nEOF\n{BODY}EOF\n",  # unquoted: backslash-newline joins, fooEOF is no end
    f"cat <<-EOF\n{BODY} EOF\n{BODY}EOF\n",  # only tabs are stripped
    f"cat <<EOF\n{BODY}EOF \n{BODY}EOF\n",  # the delimiter line holds nothing else
    f"cat <<EOF | \\\n  tee x\n{BODY}EOF\n",  # the body follows the whole (continued) line
    f"cat <<EOF\n  EOF\n{BODY}EOF\n",
]


@pytest.mark.parametrize("heredoc", HEREDOCS, ids=[str(i) for i in range(len(HEREDOCS))])
def test_here_documents_are_data(heredoc):
    script = shell.parse("B=old\n" + heredoc + "echo $B\n")
    firsts = [c.words[0].literal for c in script.commands]
    assert "gcloud" not in firsts and firsts[0] == "cat"
    assert [w.literal for w in script.commands[-1].words] == ["echo", "old"]
    assert script.commands[-1].line == 2 + heredoc.count("\n")


def test_a_quoted_delimiter_ends_its_body_after_a_backslash():
    # 'EOF': the body is literal, so `foo\` does not join the line after it.
    script = shell.parse("cat <<'EOF'\nfoo\\\nEOF\ngcloud x\n")
    assert [c.words[0].literal for c in script.commands] == ["cat", "gcloud"]


@pytest.mark.parametrize(
    "line",
    [
        "echo $((1<<2)) $((B << 1))",
        "(( X = 1 << 2 ))",
        'cat <<<"$B"',
        "echo \"<<EOF\" '<<EOF' \\<<EOF",
        "echo x # <<EOF",
    ],
)
def test_what_only_looks_like_a_here_document_is_not_one(line):
    script = shell.parse(f"B=1\n{line}\ngcloud x\n")
    assert script.commands[-1].words[0].literal == "gcloud"


@pytest.mark.parametrize(
    "text, line, problem",
    [
        ("true\ncat <<EOF\nbody\n", 2, "the here-document <<EOF is never closed: no line 'EOF' follows"),
        (
            "cat <<-'END'\n\tbody\n END\n",
            1,
            "the here-document <<-'END' is never closed: no line 'END' follows",
        ),
        ("cat <<\n", 1, "`<<` with no delimiter word after it"),
        ("cat <<'EOF\nEOF\n", 1, "unterminated ' quote"),
    ],
)
def test_a_here_document_that_never_ends_is_refused_with_its_line(text, line, problem):
    # sh would read to the end of the file (bash warns): almost always a misspelt delimiter.
    with pytest.raises(shell_words.ShellError) as error:
        shell.parse(text)
    assert (error.value.line, error.value.problem) == (line, problem)
