"""Log lines stay one short line whatever a plugin sends."""

import logging

import pytest

from core.logfmt import MAX_VALUE_CHARS, log_event

logger = logging.getLogger("tests.logfmt")


def logged(caplog, **fields):
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="tests.logfmt"):
        log_event(logger, "hello_refused", **fields)
    (record,) = caplog.records
    return record


@pytest.mark.parametrize(
    "value,line",
    [
        ("laptop-chrome", "action=hello_refused client_id=laptop-chrome"),
        ("two words", 'action=hello_refused client_id="two words"'),
        ("nul\x00byte", 'action=hello_refused client_id="nul\\u0000byte"'),
        ("esc\x1b[31mred", 'action=hello_refused client_id="esc\\u001b[31mred"'),
        ("del\x7f", 'action=hello_refused client_id="del\\u007f"'),
        ("line\nbreak", 'action=hello_refused client_id="line\\nbreak"'),
        ("lone\ud800", 'action=hello_refused client_id="lone\\ud800"'),
        ('quote"d', 'action=hello_refused client_id="quote\\"d"'),
        ("back\\slash", 'action=hello_refused client_id="back\\\\slash"'),
        ("", 'action=hello_refused client_id=""'),
    ],
)
def test_values_are_quoted_and_escaped_when_they_must_be(caplog, value, line):
    assert logged(caplog, client_id=value).getMessage() == line


def test_a_huge_value_is_cut_and_the_cut_said(caplog):
    record = logged(caplog, client_id="x" * 900_000)
    assert len(record.getMessage()) < MAX_VALUE_CHARS + 100
    assert record.getMessage().endswith(f"...(+{900_000 - MAX_VALUE_CHARS} chars)\"")
    assert len(record.fields["client_id"]) < MAX_VALUE_CHARS + 30  # for JSON handlers too


def test_a_huge_structure_is_cut_as_its_json(caplog):
    record = logged(caplog, platforms=["claude"] * 100_000)
    assert len(record.getMessage()) < MAX_VALUE_CHARS + 100
    assert logged(caplog, platforms=["claude"]).fields["platforms"] == ["claude"]


def test_an_event_can_carry_the_traceback_of_the_exception_being_handled(caplog):
    logger = logging.getLogger("tests.logfmt")
    try:
        raise RuntimeError("the database went away")
    except RuntimeError:
        with caplog.at_level(logging.ERROR, logger="tests.logfmt"):
            log_event(logger, "tick_failed", level=logging.ERROR, exc_info=True, owner="loop-1")
    [record] = caplog.records
    assert record.getMessage() == "action=tick_failed owner=loop-1"
    assert record.exc_info[0] is RuntimeError and "the database went away" in caplog.text
