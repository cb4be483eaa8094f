"""Decoding hostile JSON: what is refused, how, and what passes."""

import json

import pytest

from ingest.jsoncheck import JsonRefused, loads_checked


@pytest.mark.parametrize(
    "text,value",
    [
        ('{"a": [1, 2.5, -3e10, "x"]}', {"a": [1, 2.5, -3e10, "x"]}),
        ('"\\ud83d\\ude00"', "\U0001f600"),  # a surrogate pair is one character, not a lone surrogate
        ("[[[]]]", [[[]]]),
        ("1" * 100, int("1" * 100)),
        ('"caf\\u00e9"', "café"),
    ],
)
def test_ordinary_json_decodes_as_usual(text, value):
    assert loads_checked(text) == value


@pytest.mark.parametrize(
    "text,is_malformed,detail",
    [
        ("NaN", False, "NaN is not a number JSON allows"),
        ('{"a": Infinity}', False, "Infinity is not a number JSON allows"),
        ("[1e999]", False, "1e999 is not a finite number"),
        ("-1e400", False, "-1e400 is not a finite number"),
        ('"\\ud800"', False, "lone surrogate"),
        ('{"\\udc00": 1}', False, "lone surrogate"),  # keys too
        ('["ok", {"deep": "\\udfff"}]', False, "lone surrogate"),
        ('"a\\u0000b"', False, "NUL character"),
        ('{"\\u0000": 1}', False, "NUL character"),
        ('[{"deep": ["\\u0000"]}]', False, "NUL character"),
        ("[" * 101 + "]" * 101, True, "nested deeper than 100 levels"),
        ('{"a":' * 101 + "1" + "}" * 101, True, "nested deeper than 100 levels"),
        ("[" * 5000 + "]" * 5000, True, "nested deeper than 100 levels"),
        ("1" * 101, True, "more than 100 digits"),
        ("9" * 5000, True, "more than 100 digits"),
        ("0." + "5" * 101, True, "more than 100 digits"),
    ],
)
def test_hostile_json_is_refused_saying_why(text, is_malformed, detail):
    with pytest.raises(JsonRefused) as excinfo:
        loads_checked(text)
    assert excinfo.value.is_malformed is is_malformed
    assert detail in excinfo.value.detail


def test_broken_json_still_raises_the_decoders_error():
    with pytest.raises(json.JSONDecodeError):
        loads_checked("{oops")

