"""data/README.md accounts for every shipped data file: each is listed, under its folder's section, with its
size, md5 and sha256, and the bytes on disk match."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "data"
README = DATA / "README.md"
SECTION = re.compile(r"^## (\S+)/ ")
ROW = re.compile(r"^\| (\S+) \| ([\d,]+) \| ([0-9a-f]{32}) \| ([0-9a-f]{64}) \|")


def listed() -> dict[str, tuple[int, str, str]]:
    """data-relative path -> (bytes, md5, sha256), from the tables of data/README.md."""
    rows: dict[str, tuple[int, str, str]] = {}
    folder = None
    for line in README.read_text(encoding="utf-8").splitlines():
        if found := SECTION.match(line):
            folder = found.group(1)
        elif (found := ROW.match(line)) and folder:
            name, size, md5, sha256 = found.groups()
            path = f"{folder}/{name}"
            assert path not in rows, f"{path} is listed twice"
            rows[path] = (int(size.replace(",", "")), md5, sha256)
    return rows


def test_every_data_file_is_listed_with_matching_size_and_checksums():
    rows = listed()
    on_disk = {p.relative_to(DATA).as_posix(): p for p in DATA.rglob("*") if p.is_file() and p != README}
    assert sorted(on_disk) == sorted(rows), "data/ and the tables of data/README.md list different files"
    for rel, path in on_disk.items():
        data = path.read_bytes()
        actual = (len(data), hashlib.md5(data).hexdigest(), hashlib.sha256(data).hexdigest())
        assert actual == rows[rel], rel
