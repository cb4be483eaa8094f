"""What of a tool's result is stored: whole within the cap, its size and a preview beyond it."""

import json

import pytest

from pipelines.results_text import BlockOutcome, parse_results, render_results
from pipelines.stored_results import is_cut_result, result_for_storage


@pytest.mark.parametrize("result", [None, {}, {"text": "short"}, ["a", 1, True], "x" * 900])
def test_a_result_within_the_cap_is_stored_as_it_is(result):
    assert result_for_storage(result, max_bytes=1024) is result


@pytest.mark.parametrize("result", [
    {"text": "a" * 100_000},
    {"text": "\ufffd" * 50_000},  # six bytes each once stored
    {"text": '"\\' * 30_000},  # escapes of escapes in the preview
    ["😀"] * 20_000,  # surrogate pairs: twelve bytes each
])
@pytest.mark.parametrize("max_bytes", [1024, 1025, 4096, 65_536])
def test_a_result_over_the_cap_is_cut_within_it_with_its_whole_size(result, max_bytes):
    stored = result_for_storage(result, max_bytes=max_bytes)
    whole = json.dumps(result)
    assert is_cut_result(stored)
    assert stored["result_bytes"] == len(whole)
    assert stored["max_bytes"] == max_bytes
    assert len(json.dumps(stored)) <= max_bytes
    preview = stored["preview"].removesuffix("…")
    assert whole.startswith(preview)
    # The preview uses the room: less than one escaped character is left over.
    assert len(json.dumps(stored)) > max_bytes - 13


def test_a_result_json_cannot_write_is_stored_as_its_repr():
    assert result_for_storage({1, 2}, max_bytes=1024) == "{1, 2}"


def test_a_cut_result_still_says_so_when_the_delivery_shortens_it():
    # The defaults: 1 MiB stored, 20,000 characters delivered for the whole message.
    result = {"path": "big.txt", "text": "x" * 3_000_000}
    stored = json.loads(json.dumps(result_for_storage(result, max_bytes=1024 * 1024)))
    text = render_results([BlockOutcome(block=1, tool="files.read", status="succeeded", result=stored)],
                          max_chars=20_000)
    [delivered] = parse_results(text)
    assert delivered["truncated"] is True
    size = len(json.dumps(result))
    assert delivered["result"].startswith(f'{{"result_cut": true, "result_bytes": {size}, "max_bytes": 1048576')
