"""serving/model.py: what a SavedModel folder must be before anything opens it. Every check reads metadata
only: a FIFO is refused by its mode (opening one blocks), a 3 GB saved_model.pb by its size (parsing one took
28 s and 10 GB before TensorFlow refused it)."""

from __future__ import annotations

import os
import socket

import pytest

from serving import model
from serving.model import MAX_GRAPH_BYTES, model_dir_problem


def test_model_dir_problems(tmp_path):
    (tmp_path / "file").write_text("x")
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "empty").mkdir()
    (tmp_path / "pb-dir" / "saved_model.pb").mkdir(parents=True)
    (tmp_path / "pb-fifo").mkdir()
    os.mkfifo(tmp_path / "pb-fifo" / "saved_model.pb")
    (tmp_path / "ok").mkdir()
    (tmp_path / "ok" / "saved_model.pb").write_bytes(b"")
    assert model_dir_problem(str(tmp_path / "missing")) == f"{tmp_path}/missing: no such file or directory"
    for name in ("file", "fifo"):
        assert model_dir_problem(str(tmp_path / name)).endswith(
            ": not a directory (a SavedModel is a folder with saved_model.pb)"
        )
    assert model_dir_problem(str(tmp_path / "empty")).endswith(": no SavedModel here (no saved_model.pb)")
    for name in ("pb-dir", "pb-fifo"):
        problem = model_dir_problem(str(tmp_path / name))
        assert problem.endswith(": no SavedModel here (saved_model.pb is not a file)")
    assert model_dir_problem(str(tmp_path / "ok")) is None


def _saved_model(root):
    (root / "variables").mkdir(parents=True)
    (root / "saved_model.pb").write_bytes(b"graph")
    (root / "variables" / "variables.data-00000-of-00001").write_bytes(b"1234")
    (root / "variables" / "variables.index").write_bytes(b"idx")
    return root


def test_a_sparse_3_gb_graph_is_refused_by_its_size(tmp_path):
    root = _saved_model(tmp_path / "m")
    with open(root / "saved_model.pb", "wb") as pb:
        pb.truncate(3 << 30)  # sparse: no disk, and nothing here reads it
    assert model_dir_problem(str(root)) == (
        f"{root}/saved_model.pb: {3 << 30} bytes; allowed: a saved_model.pb "
        f"of at most {MAX_GRAPH_BYTES} bytes"
    )


@pytest.mark.parametrize("kind", ["fifo", "socket"])
def test_a_file_that_is_no_regular_file_is_refused_unopened(tmp_path, kind):
    root = _saved_model(tmp_path / "m")
    index = root / "variables" / "variables.index"
    index.unlink()
    if kind == "fifo":
        os.mkfifo(index)  # opening it would block the load for ever
    else:
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(index))
        sock.close()
    what = "a FIFO" if kind == "fifo" else "a socket"
    assert model_dir_problem(str(root)) == (
        f"{index}: not a regular file ({what}); allowed: files and folders only in a SavedModel"
    )


def test_the_files_together_are_held_to_the_model_limit(tmp_path, monkeypatch):
    root = _saved_model(tmp_path / "m")
    monkeypatch.setattr(model, "max_model_bytes", lambda: 10)  # graph 5 + data 4 + index 3 bytes
    assert model_dir_problem(str(root)) == (
        f"{root}: over 10 bytes of files; allowed: a SavedModel of at most "
        "10 bytes (half this machine's memory, at most MAX_MODEL_BYTES)"
    )
    monkeypatch.setattr(model, "max_model_bytes", lambda: 12)
    assert model_dir_problem(str(root)) is None


def test_a_symlink_loop_or_a_flood_of_files_ends_the_walk(tmp_path, monkeypatch):
    root = _saved_model(tmp_path / "m")
    os.symlink(root, root / "assets")  # TensorFlow would follow it; so does the walk, and it must end
    problem = model_dir_problem(str(root))
    assert problem.startswith(f"{root}/assets/assets/") and problem.endswith(
        ": too many levels of symbolic links"
    )
    (root / "assets").unlink()
    monkeypatch.setattr(model, "MAX_MODEL_ENTRIES", 3)  # the folder, 2 variables files, saved_model.pb: 4
    assert model_dir_problem(str(root)) == f"{root}: over 3 files and folders; allowed: at most 3"


def test_a_model_over_half_the_memory_is_refused(tmp_path, monkeypatch):
    """On a machine of 24 bytes (sysconf's answer faked), a 12-byte SavedModel fits and a 13-byte one does
    not; where sysconf cannot tell, MAX_MODEL_BYTES alone holds."""
    root = _saved_model(tmp_path / "m")  # graph 5 + data 4 + index 3 bytes
    sizes = {"SC_PAGE_SIZE": 4, "SC_PHYS_PAGES": 6}
    monkeypatch.setattr(model.os, "sysconf", lambda name: sizes[name])
    assert model_dir_problem(str(root)) is None
    (root / "variables" / "extra").write_bytes(b"x")
    assert model_dir_problem(str(root)).startswith(f"{root}: over 12 bytes of files;")
    sizes["SC_PHYS_PAGES"] = 2 * model.MAX_MODEL_BYTES  # memory to spare: the fixed limit is the one

    def no_sysconf(name):
        raise ValueError(name)

    assert model.max_model_bytes() == model.MAX_MODEL_BYTES
    monkeypatch.setattr(model.os, "sysconf", no_sysconf)
    assert model.max_model_bytes() == model.MAX_MODEL_BYTES and model_dir_problem(str(root)) is None
