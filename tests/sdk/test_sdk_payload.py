"""The SDK's payload readers (docs/plugins.md §3): each names `path.key` and the problem, never
the value; free text keeps the message with U+FFFD, ids must be valid Unicode."""

from __future__ import annotations

import pytest

from hermes_core.sdk import (MalformedPayload, field_bool, field_id, field_int, field_list, field_object,
                             field_text)


def problem(reader, data, **kwargs) -> str:
    with pytest.raises(MalformedPayload) as caught:
        reader(data, "k", "msg", **kwargs)
    return str(caught.value)


def test_text_replaces_lone_surrogates_and_joins_split_pairs():
    assert field_text({"k": "a\ud800b"}, "k", "msg") == "a\ufffdb"
    assert field_text({"k": "\ud83d\ude00"}, "k", "msg") == "\U0001F600"
    assert field_text({}, "k", "msg") is None
    assert problem(field_text, {"k": 5}) == "malformed payload: msg.k must be a string, got int"
    assert problem(field_text, {}, required=True) == "malformed payload: msg.k is missing"


def test_ids_are_valid_unicode_stripped_and_bounded():
    assert field_id({"k": "  abc "}, "k", "msg") == "abc"
    assert field_id({"k": "   "}, "k", "msg") is None
    assert problem(field_id, {"k": "   "}, required=True) == "malformed payload: msg.k is empty"
    assert problem(field_id, {"k": "a\udc00"}) == "malformed payload: msg.k is not valid Unicode (lone surrogate)"
    assert problem(field_id, {"k": 15551234567}) == "malformed payload: msg.k must be a string, got int"
    assert problem(field_id, {"k": "x" * 5}, max_length=4) == "malformed payload: msg.k is longer than 4 characters"


def test_integers_refuse_booleans_and_check_bounds():
    assert field_int({"k": 7}, "k", "msg", low=0, high=7) == 7
    assert problem(field_int, {"k": True}) == "malformed payload: msg.k must be an integer, got bool"
    assert problem(field_int, {"k": -1}, low=0, high=10) == "malformed payload: msg.k is out of range (0..10)"
    assert problem(field_int, {"k": -1}, low=0) == "malformed payload: msg.k is out of range (0..)"


def test_booleans_objects_and_lists():
    assert field_bool({}, "k", "msg") is False
    assert problem(field_bool, {"k": 1}) == "malformed payload: msg.k must be a boolean, got int"
    assert field_list({"k": None}, "k", "msg") == []
    assert problem(field_list, {"k": {}}) == "malformed payload: msg.k must be a list, got dict"
    assert problem(field_object, {"k": []}) == "malformed payload: msg.k must be an object, got list"
