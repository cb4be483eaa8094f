"""Error texts reduced to their cause (automation.errors): pure, no database."""

import pytest

from automation.errors import error_first_line, error_signature, failure_group_key


@pytest.mark.parametrize(
    "error,signature",
    [
        (None, ""),
        ("", ""),
        ("\n  HTTP 502 from the page\nTraceback ...", "HTTP <n> from the page"),
        ("no such file: notes/missing-17.md (errno 2)", "no such file: notes/missing-<n>.md (errno <n>)"),
        ("task 3f2a9c0b1d2e4f5a6b7c8d9e0f1a2b3c lost its lease", "task <id> lost its lease"),
        ("request 123e4567-e89b-12d3-a456-426614174000 unanswered", "request <id> unanswered"),
        ("timed out after 2.5 s", "timed out after <n> s"),
        ("deadbeef is a word, cafe too", "deadbeef is a word, cafe too"),
    ],
)
def test_error_signature_strips_ids_and_numbers_from_the_first_line(error, signature):
    assert error_signature(error) == signature


def test_the_first_line_skips_blank_lines():
    assert error_first_line("\n\n  boom  \nmore") == "boom"


def test_a_group_key_depends_on_kind_tool_and_signature():
    key = failure_group_key(kind="instruction.execute", tool="files.read", signature="x")
    assert key == failure_group_key(kind="instruction.execute", tool="files.read", signature="x")
    assert key != failure_group_key(kind="instruction.execute", tool="shell.run", signature="x")
    assert len(key) == 16
