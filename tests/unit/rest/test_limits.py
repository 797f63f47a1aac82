"""The REST front's pre-parse checks: media type and JSON depth on raw bytes."""

from __future__ import annotations

import json

import pytest

from libs.rest.limits import (
    BodyTooDeep,
    UnsupportedMediaType,
    check_json_depth,
    check_media_type,
    json_depth,
)


@pytest.mark.parametrize("text, depth", [
    ("1", 0), ("{}", 1), ("[[1, [2]], {}]", 3), ('{"a": "[[[[{{{"}', 1),
    ('{"a": "\\\\", "b": [[[]]]}', 4),  # an escaped backslash does not escape the quote
    ('{"a": "\\"[[[", "b": []}', 2),  # an escaped quote does not end the string
    ('["\\\\\\"[[["]', 1), ("", 0),
])
def test_json_depth_skips_strings(text, depth):
    assert json_depth(text.encode()) == depth


def test_json_depth_agrees_with_the_parser_on_generated_bodies():
    body = {"a": [{"b": ["x]]", {"c": [[["\\\""]]]}]}], "d": "{{{{"}
    text = json.dumps(body)
    assert json_depth(text.encode()) == 8


def test_depth_limit_names_the_depth():
    check_json_depth(b"[" * 64 + b"]" * 64, 64)
    with pytest.raises(BodyTooDeep, match="65 levels deep; at most 64"):
        check_json_depth(b"[" * 65 + b"]" * 65, 64)


@pytest.mark.parametrize("value", ["application/json", "application/json; charset=utf-8",
                                   " APPLICATION/JSON "])
def test_json_media_types_pass(value):
    check_media_type(value)


@pytest.mark.parametrize("value", [None, "", "text/plain", "application/jsonp",
                                   "application/x-www-form-urlencoded"])
def test_other_media_types_are_refused(value):
    with pytest.raises(UnsupportedMediaType):
        check_media_type(value)
