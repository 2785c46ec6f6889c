"""Cloud Storage's bucket-name rules (common.gcs), which infra's config and jobs/ read gs:// URIs with."""

from __future__ import annotations

import pytest

from common.gcs import UNDOTTED_BUCKET_NAME, is_bucket_name


@pytest.mark.parametrize(
    ("name", "ok"),
    [
        ("abc", True),
        ("my_ml-data", True),
        ("data.example.com", True),  # dots are allowed (a domain-named bucket)
        ("a" * 63, True),
        ("a" * 64, False),  # over 63 without dots
        (".".join(["a" * 63] * 3), True),  # up to 222 with dots, each component <= 63
        ("a" * 64 + ".b", False),
        ("a..b", False),
        (".ab", False),
        ("ab", False),
        ("Abc", False),
    ],
)
def test_bucket_names_as_cloud_storage_takes_them(name, ok):
    assert is_bucket_name(name) is ok


def test_infra_named_buckets_have_no_dots():
    assert UNDOTTED_BUCKET_NAME.fullmatch("my-state_bucket")
    assert not UNDOTTED_BUCKET_NAME.fullmatch("state.example.com")
