import pytest

from core.text import is_storable, storable


@pytest.mark.parametrize(
    "text,expected",
    [
        ("plain", "plain"),
        ("café ✓ 🎉", "café ✓ 🎉"),  # a surrogate pair in UTF-16 is one character here
        ("a\x00b", "ab"),
        ("\ud800x\udfff", "x"),
        ("\x00", ""),
    ],
)
def test_storable_drops_nul_and_lone_surrogates_only(text, expected):
    assert storable(text) == expected
    assert is_storable(text) is (text == expected)
