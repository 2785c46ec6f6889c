"""serving/requests.py: how a request body becomes the signature's batched inputs and outputs become
predictions (every dtype and shape a signature can declare, and each way a request can be wrong). The server
over HTTP is tested in test_app.py (a toy export: the hostile requests, batching, limits, SIGTERM) and beside
each task's export: tests/trainer/test_task.py (census, through run_job.py serve), test_image_classifier.py
and test_recommender.py."""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest

from serving.requests import (
    MAX_INSTANCES,
    MAX_REQUEST_PIXELS,
    TINY_PNG,
    InputSpec,
    RequestError,
    Signature,
    example_instance,
    parse_body,
    predictions,
    read_request,
)
from tests.trainer.image_helpers import png_header, webp_header
from trainer.models.image_classifier.decoding import image_pixels

# Signatures shaped like the tasks' (census: named scalars; image: one bytes input; recommender: ids and a
# count) plus the dtypes and shapes none of them uses yet.
SIGNATURES = {
    "serving_default": Signature("serving_default", (InputSpec("item", "string", (None,)),
                                                     InputSpec("user", "string", (None,))), ("score",), None),
    "top_k": Signature("top_k", (InputSpec("k", "int32", (None,)), InputSpec("user", "string", (None,))),
                       ("items", "scores"), None),
    "image": Signature("image", (InputSpec("image_bytes", "string", (None,)),), ("label",), None),
    "dense": Signature("dense", (InputSpec("flag", "bool", (None,)), InputSpec("x", "float32", (None, 3)),
                                 InputSpec("seq", "int64", (None, None))), ("y",), None),
}


def request(instances, signature=None, **extra):
    payload = {"instances": instances, **extra}
    if signature:
        payload["parameters"] = {"signature": signature}
    return read_request(parse_body(json.dumps(payload).encode()), SIGNATURES)


def test_keyed_instances_become_one_batched_column_per_input():
    signature, columns, n = request([{"user": "1", "item": "50"}, {"user": "é", "item": {"b64": "AAE="}}])
    assert (signature.name, n) == ("serving_default", 2)
    assert columns["user"].tolist() == [b"1", "é".encode()] and columns["item"].tolist() == [b"50", b"\0\1"]
    _, columns, _ = request([{"user": "1", "k": 5}, {"user": "2", "k": 7.0}], "top_k")  # 7.0: a JSON double
    assert columns["k"].dtype == np.int32 and columns["k"].tolist() == [5, 7]


def test_a_one_input_signature_takes_bare_values_and_b64():
    png = base64.b64encode(TINY_PNG).decode()
    _, columns, n = request([{"b64": png}, {"image_bytes": {"b64": png}}, "text"], "image")
    assert n == 3 and columns["image_bytes"].tolist() == [TINY_PNG, TINY_PNG, b"text"]


def test_numbers_booleans_and_nested_shapes():
    _, columns, _ = request([{"flag": True, "x": [1, 2.5, -3e38], "seq": [1, 2]},
                             {"flag": False, "x": [0, 0, 0], "seq": [3, 2**62]}], "dense")
    assert columns["x"].dtype == np.float32 and columns["x"].shape == (2, 3)
    assert columns["seq"].dtype == np.int64 and columns["seq"].tolist() == [[1, 2], [3, 2**62]]
    assert columns["flag"].tolist() == [True, False]


BAD_REQUESTS = [
    # id, body (bytes) or payload (dict), the field named, a fragment of the message
    ("not-json", b"{instances", "body", "not JSON"),
    ("not-utf8", b'{"instances": ["\xff"]}', "body", "not JSON"),
    ("nan", b'{"instances": [NaN]}', "body", "NaN is not JSON"),
    ("too-deep", b'{"instances": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "body", "nested too deeply"),
    ("list", b"[1]", "body", "a JSON list, not an object"),
    ("unknown-field", {"instances": [], "deployedModelId": "1"}, "deployedModelId", "allowed: instances"),
    ("no-instances", {"parameters": {}}, "instances", "missing"),
    ("empty", {"instances": []}, "instances", f"allowed: a list of 1 to {MAX_INSTANCES}"),
    ("too-many", {"instances": [{"user": "1", "item": "2"}] * (MAX_INSTANCES + 1)}, "instances",
     f"{MAX_INSTANCES + 1} instances"),
    ("not-a-list", {"instances": {"user": "1"}}, "instances", "a JSON object"),
    ("parameters-list", {"instances": [1], "parameters": [1]}, "parameters", "a JSON list"),
    ("unknown-parameter", {"instances": [1], "parameters": {"k": 5}}, "parameters.k", "allowed: signature"),
    ("unknown-signature", {"instances": [1], "parameters": {"signature": "predict"}}, "parameters.signature",
     "allowed: dense, image, serving_default, top_k"),
    ("signature-list", {"instances": [1], "parameters": {"signature": ["top_k"]}}, "parameters.signature",
     'no signature ["top_k"]'),
    ("long-unknown-field", {"instances": [1], "x" * 100_000: 1}, "x" * 60, "unknown field"),
    ("missing-input", {"instances": [{"user": "1"}]}, "instances[0].item", "missing"),
    ("unknown-input", {"instances": [{"user": "1", "item": "2", "rating": 5}]}, "instances[0].rating",
     "allowed: item, user"),
    ("bare-for-two", {"instances": ["1"]}, "instances[0]",
     "a JSON string; allowed: an object with item, user"),
    ("number-for-string", {"instances": [{"user": 1, "item": "2"}]}, "instances[0].user",
     'a string, or {"b64": BASE64}'),
    ("bad-b64", {"instances": [{"user": {"b64": "%%%"}, "item": "2"}]}, "instances[0].user.b64",
     "not base64"),
    ("b64-not-string", {"instances": [{"user": {"b64": 1}, "item": "2"}]}, "instances[0].user",
     "a JSON object"),
    ("fraction-for-int", {"instances": [{"user": "1", "k": 2.5}], "parameters": {"signature": "top_k"}},
     "instances[0].k", "-2147483648..2147483647 (int32)"),
    ("int32-overflow", {"instances": [{"user": "1", "k": 2**31}], "parameters": {"signature": "top_k"}},
     "instances[0].k", "got 2147483648"),
    ("bool-for-int", {"instances": [{"user": "1", "k": True}], "parameters": {"signature": "top_k"}},
     "instances[0].k", "got true"),
    ("huge-int-for-float", {"instances": [{"flag": True, "x": [10**400, 0, 0], "seq": [1]}],
                            "parameters": {"signature": "dense"}}, "instances[0].x[0]", "(float32)"),
    ("float32-overflow", {"instances": [{"flag": True, "x": [1e39, 0, 0], "seq": [1]}],
                          "parameters": {"signature": "dense"}}, "instances[0].x[0]", "got 1e+39"),
    ("number-for-bool", {"instances": [{"flag": 1, "x": [0, 0, 0], "seq": [1]}],
                         "parameters": {"signature": "dense"}}, "instances[0].flag", "true or false"),
    ("wrong-length", {"instances": [{"flag": True, "x": [0, 0], "seq": [1]}],
                      "parameters": {"signature": "dense"}}, "instances[0].x", "2 values"),
    ("scalar-for-list", {"instances": [{"flag": True, "x": 0, "seq": [1]}],
                         "parameters": {"signature": "dense"}}, "instances[0].x", "a JSON number"),
    ("ragged-batch", {"instances": [{"flag": True, "x": [0, 0, 0], "seq": [1]},
                                    {"flag": True, "x": [0, 0, 0], "seq": [1, 2]}],
                      "parameters": {"signature": "dense"}}, "instances[1].seq", "shape [2] differs"),
    ("empty-object-for-one", {"instances": [{}], "parameters": {"signature": "image"}}, "instances[0]",
     "an empty object"),
]


@pytest.mark.parametrize("body, field, fragment", [case[1:] for case in BAD_REQUESTS],
                         ids=[case[0] for case in BAD_REQUESTS])
def test_bad_requests_name_the_field_and_what_is_allowed(body, field, fragment):
    with pytest.raises(RequestError) as refused:
        read_request(parse_body(body if isinstance(body, bytes) else json.dumps(body).encode()), SIGNATURES)
    message = str(refused.value)
    assert refused.value.field == field and message.startswith(f"{field}: ") and fragment in message, message
    assert "\n" not in message and len(message) < 400


def test_images_are_held_to_a_pixel_budget_by_their_headers():
    bomb = base64.b64encode(png_header(30_000, 30_000)).decode()  # 900 MP declared in 33 bytes
    with pytest.raises(RequestError, match=f"image_bytes: images of over {MAX_REQUEST_PIXELS} pixels"):
        request([{"b64": bomb}], "image")
    half = base64.b64encode(png_header(5000, 5000)).decode()  # 25 MP each: two fit, three do not
    assert request([{"b64": half}] * 2, "image")[2] == 2
    with pytest.raises(RequestError, match="image_bytes: images of over"):
        request([{"b64": half}] * 3, "image")
    # A plain JSON string is UTF-8: an ASCII-only GIF header can still declare 32639 x 32639 pixels.
    with pytest.raises(RequestError, match="images of over"):
        request(["GIF89a\x7f\x7f\x7f\x7f\x00\x00\x00;"], "image")
    assert image_pixels(TINY_PNG) == 1  # the warm-up's image (example_instance) fits


@pytest.mark.parametrize("chunk", [b"VP8L", b"VP8X", b"VP8 "])
def test_a_webp_is_held_to_the_pixel_budget_and_one_without_a_size_is_refused(chunk):
    """TensorFlow decodes WebP: a 50-byte header declaring 8000 x 8000 must not reach the decode."""
    bomb = base64.b64encode(webp_header(8000, 8000, chunk)).decode()
    with pytest.raises(RequestError, match=f"image_bytes: images of over {MAX_REQUEST_PIXELS} pixels"):
        request([{"b64": bomb}], "image")
    assert request([{"b64": base64.b64encode(webp_header(100, 100, chunk)).decode()}], "image")[2] == 1
    no_size = base64.b64encode(webp_header(100, 100, b"ALPH")).decode()
    with pytest.raises(RequestError, match="image_bytes: an image whose header gives no size"):
        request([{"b64": no_size}], "image")


def test_predictions_one_per_instance_strings_as_text_or_b64():
    outputs = {"label": np.array([b"roses", b"\xff\xfe"], dtype=object), "class_id": np.array([0, 3]),
               "probabilities": np.array([[0.5, 0.5], [0.25, 0.75]], np.float32),
               "thumbnail_bytes": np.array([b"ab", b"cd"], dtype=object), "known": np.array([True, False])}
    got = predictions(outputs, 2)
    assert got[0] == {"label": "roses", "class_id": 0, "probabilities": [0.5, 0.5],
                      "thumbnail_bytes": {"b64": "YWI="}, "known": True}
    assert got[1]["label"] == {"b64": "//4="} and got[1]["thumbnail_bytes"] == {"b64": "Y2Q="}
    assert predictions({"score": np.array([1.5, 2.0], np.float32)}, 2) == [1.5, 2.0]  # one output: bare
    with pytest.raises(ValueError, match=r"output score has shape \[3\], not one row per instance \(2\)"):
        predictions({"score": np.zeros(3)}, 2)


@pytest.mark.parametrize("name", sorted(SIGNATURES))
def test_the_example_instance_is_a_valid_request(name):
    """It is the warm-up call's input and the curl the server prints: accepted by every signature."""
    payload = {"instances": [example_instance(SIGNATURES[name])], "parameters": {"signature": name}}
    signature, columns, n = read_request(payload, SIGNATURES)
    assert signature.name == name and n == 1
    if name == "image":
        assert columns["image_bytes"].tolist() == [TINY_PNG]  # an image input warms up on a real image


@pytest.mark.parametrize("depth", range(900, 1010, 2))
def test_a_value_nested_as_deep_as_json_allows_is_a_refusal_not_a_crash(depth):
    """Around json's own recursion limit (978-980 deep took the old server's error path down): whatever the
    depth, one line naming a field."""
    body = b'{"instances": [{"user": ' + b"[" * depth + b"1" + b"]" * depth + b', "item": "2"}]}'
    with pytest.raises(RequestError) as refused:
        read_request(parse_body(body), SIGNATURES)
    assert refused.value.field in ("body", "instances[0].user") and "\n" not in str(refused.value)


def test_jpeg_sizes_are_read_without_a_tensorflow_call(monkeypatch):
    """Strings that start like a JPEG are checked on the event loop (small bodies): a pure-Python read of the
    start-of-frame, not an eager op each (thousands of them blocked every other request)."""
    tf = pytest.importorskip("tensorflow")
    photo = tf.io.encode_jpeg(np.zeros((30, 20, 3), np.uint8)).numpy()

    def no_op(*args, **kwargs):
        raise AssertionError("a TensorFlow call to size a JPEG")

    monkeypatch.setattr(tf.io, "extract_jpeg_shape", no_op)
    assert image_pixels(photo) == 600
    assert request([{"b64": base64.b64encode(photo).decode()}] * 3, "image")[2] == 3
    with pytest.raises(RequestError, match="image_bytes: an image whose header gives no size"):
        request([{"b64": "/9j/"}] * 1000, "image")  # FF D8 FF: a JPEG's magic and nothing more
