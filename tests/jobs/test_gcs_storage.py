"""GcsStorage (the real google-cloud-storage client) against a fake Cloud Storage JSON API on 127.0.0.1."""

from __future__ import annotations

import base64
import email
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlparse

import google_crc32c
import pytest

from jobs.cloud.client import GcsStorage
from tests.jobs.fake_vertex import send_json


class _Gcs(BaseHTTPRequestHandler):
    objects: dict[str, bytes]
    uploads: list[dict]

    def _send(self, status: int, payload: dict) -> None:
        send_json(self, status, payload)

    def _metadata(self, bucket: str, name: str) -> dict:
        data = self.server.objects[f"{bucket}/{name}"]
        return {"bucket": bucket, "name": name, "size": str(len(data)), "generation": "7",
                "crc32c": base64.b64encode(google_crc32c.Checksum(data).digest()).decode(),
                "temporaryHold": f"{bucket}/{name}" in self.server.held}

    def do_GET(self):  # noqa: N802 - http.server naming
        path = urlparse(self.path).path  # [/download]/storage/v1/b/<bucket>/o/<name>
        if path.endswith("/o"):  # objects.list: one page of the names under ?prefix=
            bucket = path.removeprefix("/storage/v1/b/").removesuffix("/o")
            query = parse_qs(urlparse(self.path).query)
            prefix, delimiter = query.get("prefix", [""])[0], query.get("delimiter", [""])[0]
            names = sorted(k.partition("/")[2] for k in self.server.objects
                           if k.startswith(f"{bucket}/{prefix}"))
            if delimiter:  # the objects directly under the prefix; deeper ones are rolled up into prefixes
                names = [n for n in names if delimiter not in n[len(prefix):]]
            self.server.listed += len(names)
            self._send(200, {"items": [self._metadata(bucket, n) for n in names]})
            return
        media = path.startswith("/download/")
        bucket, _, name = path.removeprefix("/download").removeprefix("/storage/v1/b/").partition("/o/")
        key = f"{bucket}/{unquote(name)}"
        data = self.server.objects.get(key)
        if data is None:
            self._send(404, {"error": {"code": 404, "message": "No such object"}})
        elif not media:
            self._send(200, self._metadata(bucket, unquote(name)))
        else:  # the object's bytes (alt=media), a Range of them when asked
            self.server.downloads.append(
                (parse_qs(urlparse(self.path).query).get("generation"), self.headers.get("Range"))
            )
            found = re.fullmatch(r"bytes=(\d+)-(\d+)", self.headers.get("Range") or "")
            part = data[int(found[1]) : int(found[2]) + 1] if found else data
            self.send_response(206 if found else 200)
            self.send_header("Content-Length", str(len(part)))
            self.end_headers()
            self.wfile.write(part)

    def do_POST(self):  # noqa: N802
        url = urlparse(self.path)  # /upload/storage/v1/b/<bucket>/o?uploadType=multipart&ifGenerationMatch=0
        bucket = url.path.removeprefix("/upload/storage/v1/b/").split("/")[0]
        query = parse_qs(url.query)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        message = email.message_from_bytes(
            b"Content-Type: " + self.headers["Content-Type"].encode() + b"\r\n\r\n" + body
        )
        metadata_part, media_part = message.get_payload()
        name = json.loads(metadata_part.get_payload())["name"]
        self.server.uploads.append({"name": name, "query": query})
        key = f"{bucket}/{name}"
        if query.get("ifGenerationMatch") == ["0"] and key in self.server.objects:
            self._send(
                412,
                {
                    "error": {
                        "code": 412,
                        "message": "At least one of the pre-conditions you specified did not hold.",
                    }
                },
            )
            return
        self.server.objects[key] = media_part.get_payload(decode=True)
        self._send(200, {"bucket": bucket, "name": name, "generation": "1"})

    def do_PATCH(self):  # noqa: N802 - objects.patch: only the temporary hold is ever changed
        bucket, _, name = urlparse(self.path).path.removeprefix("/storage/v1/b/").partition("/o/")
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.patches.append((unquote(name), body))
        if body.get("temporaryHold"):
            self.server.held.add(f"{bucket}/{unquote(name)}")
        self._send(200, self._metadata(bucket, unquote(name)))

    def log_message(self, *args):
        pass


@pytest.fixture
def gcs():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Gcs)
    server.objects, server.uploads, server.downloads = {}, [], []
    server.held, server.patches, server.listed = set(), [], 0
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def store(gcs):
    """GcsStorage on the real storage client, pointed at the fake."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    client = storage.Client(
        project="demo-project",
        credentials=AnonymousCredentials(),
        client_options={"api_endpoint": f"http://127.0.0.1:{gcs.server_address[1]}"},
    )
    return GcsStorage("demo-project", client=client)


def test_exists_and_upload_only_if_absent(gcs, store, tmp_path):
    uri = "gs://demo-staging/packages/0123/trainer-0.1.0.tar.gz"
    package = tmp_path / "trainer-0.1.0.tar.gz"
    package.write_bytes(b"sdist bytes")

    assert store.exists(uri) is False
    store.upload(package, uri)
    assert gcs.objects == {"demo-staging/packages/0123/trainer-0.1.0.tar.gz": b"sdist bytes"}
    assert gcs.uploads[0]["query"]["ifGenerationMatch"] == ["0"]
    assert store.exists(uri) is True
    # A concurrent submit that uploaded first: the precondition fails, which is success for us.
    package.write_bytes(b"other bytes")
    store.upload(package, uri)
    assert gcs.objects["demo-staging/packages/0123/trainer-0.1.0.tar.gz"] == b"sdist bytes"


def test_read_bytes_is_bounded_and_none_when_absent(gcs, store):
    gcs.objects["demo-models/run/model/metrics.json"] = b'{"eval": {"auc": 0.93}}'
    assert store.read_bytes("gs://demo-models/run/model/metrics.json", 1024) == b'{"eval": {"auc": 0.93}}'
    assert store.read_bytes("gs://demo-models/run/model/absent.json", 1024) is None
    # Over the limit, only limit + 1 bytes come down: enough for the caller to see it is too big.
    gcs.objects["demo-models/huge.json"] = b"x" * 100
    assert store.read_bytes("gs://demo-models/huge.json", 10) == b"x" * 11
    assert gcs.downloads == [(["7"], None), (["7"], "bytes=0-10")]  # the generation whose size was read


def test_hold_patches_each_unheld_object_under_the_folder_and_only_those(gcs, store):
    for name in ("model/saved_model.pb", "model/variables/variables.index", "model_old/x", "logs/x"):
        gcs.objects[f"demo-models/s/4/{name}"] = b"x"
    gcs.held.add("demo-models/s/4/model/saved_model.pb")  # held by an earlier report
    assert store.hold("gs://demo-models/s/4/model/") == 2
    # One metadata patch, of the one object not yet held; model_old/ is a sibling, not under model/.
    assert gcs.patches == [("s/4/model/variables/variables.index", {"temporaryHold": True})]
    assert gcs.held == {f"demo-models/s/4/model/{n}" for n in ("saved_model.pb", "variables/variables.index")}
    assert store.hold("gs://demo-models/s/4/model") == 2 and len(gcs.patches) == 1  # nothing new to patch
    assert store.hold("gs://demo-models/s/9/model/") == 0


def test_identify_lists_a_globs_own_folder_with_the_checksum_a_local_copy_has(gcs, store, tmp_path):
    from jobs.definition.experiments import file_identity

    for name in ("part-0.csv", "part-1.csv", "part-1.json", "other.csv"):
        gcs.objects[f"demo-data/shards/{name}"] = name.encode()
    for i in range(50):  # years of older shards in a subfolder: not this glob's, and not listed either
        gcs.objects[f"demo-data/shards/archive/part-{i}.csv"] = b"old"
    found = store.identify("gs://demo-data/shards/*.csv", 100)
    assert [uri for uri, _ in found] == [f"gs://demo-data/shards/{n}" for n in ("other.csv", "part-0.csv",
                                                                                 "part-1.csv")]
    local = tmp_path / "other.csv"
    local.write_bytes(b"other.csv")
    assert found[0][1] == {**file_identity(local), "generation": "7"}  # as a local run of the same bytes
    assert gcs.listed <= 4  # the folder's own objects, not the archive's 50
    assert store.identify("gs://demo-data/shards/part-*.csv", 1) == found[1:2]
    assert store.identify("gs://demo-data/shards/other.csv", 5) == found[:1]
    assert store.identify("gs://demo-data/shards/none-*.csv", 5) == []
