"""The loader's limits: what a hostile or broken job file (or --set value) is refused for, and what it still
accepts. Each refusal is one JobError line; none reads more than the cap, expands an alias bomb or blocks."""

from __future__ import annotations

import os
import socket

import pytest

from common.reader import MAX_DEPTH, MAX_FILE_BYTES, MAX_VALUES
from jobs.definition import loader
from jobs.definition.errors import JobError
from jobs.definition.loader import load_file, load_text, parse_scalar
from jobs.definition.overrides import Override

# Nine levels of nine aliases: 9**9 (387 million) strings from 380 bytes once expanded.
ALIAS_BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{n}: &{n} [{', '.join([f'*{p}'] * 9)}]\n" for p, n in zip("abcdefgh", "bcdefghi", strict=True)
)


def nested(depth: int) -> str:
    """A block mapping ``depth`` levels deep."""
    return "".join(f"{'  ' * i}k{i}:\n" for i in range(depth)) + f"{'  ' * depth}leaf: 1\n"


def test_an_alias_bomb_is_refused_after_the_cap_not_expanded():
    assert len(ALIAS_BOMB) < 400
    with pytest.raises(JobError) as caught:
        load_text(ALIAS_BOMB, "bomb.yaml")
    assert f"expands to more than {MAX_VALUES} values" in str(caught.value)
    assert str(caught.value).startswith("bomb.yaml: ")


def test_aliases_used_a_few_times_still_load():
    doc = load_text("pool: &p {args: [a, b]}\nsame: *p\nagain: *p\n", "ok.yaml")
    assert doc.data["again"] == {"args": ["a", "b"]}
    assert doc.shared["pool.args"] == ("pool.args", "same.args", "again.args")


def test_nesting_is_capped():
    assert load_text(nested(MAX_DEPTH - 1), "f.yaml").data  # the deepest allowed document loads
    with pytest.raises(JobError) as caught:
        load_text(nested(MAX_DEPTH + 1), "f.yaml")
    assert f"nested more than {MAX_DEPTH} levels deep" in str(caught.value)


def test_nesting_too_deep_for_the_parser_is_one_error():
    with pytest.raises(JobError) as caught:
        load_text("a: " + "[" * 5000 + "]" * 5000, "deep.yaml")
    assert "deep.yaml: (parse): nested too deep to parse" in str(caught.value)


@pytest.mark.parametrize(
    "make, kind",
    [
        (lambda p: p.mkdir(), "a directory"),
        (lambda p: os.mkfifo(p), "a FIFO"),  # opening it for reading must not wait for a writer
        (lambda p: p.symlink_to("/dev/null"), "a character device"),
    ],
    ids=["directory", "fifo", "device"],
)
def test_only_regular_files_are_read(tmp_path, make, kind):
    path = tmp_path / "job.yaml"
    make(path)
    with pytest.raises(JobError) as caught:
        load_file(path)
    assert str(caught.value) == (
        f"{path}: (file): not a regular file ({kind}); "
        "allowed: a regular UTF-8 YAML file such as jobs/census_cpu.yaml"
    )


def test_a_socket_is_not_a_job_file(tmp_path):
    path = tmp_path / "s.yaml"
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(path))
        with pytest.raises(JobError) as caught:
            load_file(path)
    # Linux refuses to open() a socket (ENXIO): refused before any fstat, still one line.
    assert str(caught.value).startswith(f"{path}: (file): cannot open: No such device or address; allowed: ")


def test_an_oversized_file_is_refused_before_it_is_read(tmp_path, monkeypatch):
    path = tmp_path / "big.yaml"
    path.write_text("# padding\n" * (MAX_FILE_BYTES // 10 + 1))
    monkeypatch.setattr(loader, "load_text", lambda *a: pytest.fail("an oversized file was parsed"))
    with pytest.raises(JobError) as caught:
        load_file(path)
    assert f"allowed: at most {MAX_FILE_BYTES} bytes" in str(caught.value)


def test_a_file_that_is_not_utf8_names_the_byte(tmp_path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"displayName: caf\xe9\n")
    with pytest.raises(JobError) as caught:
        load_file(path)
    assert "not UTF-8 (byte 16)" in str(caught.value)


def test_set_values_obey_the_same_limits():
    assert parse_scalar("[&a [1, 2], *a]") == [[1, 2], [1, 2]]  # a small alias is still a value
    with pytest.raises(JobError) as caught:
        Override.parse(f"displayName={'[' * 40}{']' * 40}", "job.yaml")
    assert str(caught.value).startswith("job.yaml: --set displayName: nested more than")


def test_a_set_alias_bomb_is_refused():
    levels = ["&l0 [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 9):
        levels.append(f"&l{i} [{', '.join([f'*l{i - 1}'] * 9)}]")
    with pytest.raises(JobError) as caught:
        Override.parse(f"args=[{', '.join(levels)}]", "job.yaml")
    assert str(caught.value).startswith("job.yaml: --set args: the document expands to more than")


def test_errors_never_carry_terminal_control_characters(tmp_path):
    path = tmp_path / "evil\u202e\x1b[2J.yaml"
    with pytest.raises(JobError) as caught:
        load_file(path)
    text = str(caught.value)
    assert "\\u202e\\x1b[2J.yaml: (file): no such job file" in text
    assert text.isprintable()
