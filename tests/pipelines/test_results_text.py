import datetime
import json
import random
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines import results_text
from pipelines.results_text import (
    ELLIPSIS,
    NO_BLOCKS,
    NO_ERROR_MESSAGE,
    PREVIEW_WHEN_LEAVING_OUT,
    BlockOutcome,
    parse_results,
    render_results,
)

ROOMY = 1_000_000


def only(outcome, *, max_chars=ROOMY):
    (parsed,) = parse_results(render_results([outcome], max_chars=max_chars))
    return parsed


def headers(text):
    return [line for line in text.split("\n") if line.startswith("Block ")]


def is_fully_parsed(text, outcomes):
    """Every block parses, and the fences hold nothing but one JSON line each."""
    lines = text.split("\n")
    openings = [i for i, line in enumerate(lines) if line == "```baa-result"]
    assert len(openings) == len(outcomes)
    for i in openings:
        json.loads(lines[i + 1])
        assert lines[i + 2] == "```"
    assert len(parse_results(text)) == len(outcomes)
    return True


@pytest.mark.parametrize(
    "outcome,expected,header",
    [
        (
            BlockOutcome(1, "files.read", "succeeded", {"text": "hi", "size": 2, "truncated": False}),
            {"block": 1, "tool": "files.read", "ok": True, "result": {"text": "hi", "size": 2, "truncated": False}},
            "Block 1 · files.read · succeeded",
        ),
        (
            BlockOutcome(1, "time.now", "succeeded", None),
            {"block": 1, "tool": "time.now", "ok": True, "result": None},
            "Block 1 · time.now · succeeded",
        ),
        (
            BlockOutcome(2, "shell.run", "failed", {"exit_code": 1, "stdout": "", "stderr": "no"}, "exit code 1"),
            {
                "block": 2,
                "tool": "shell.run",
                "ok": False,
                "status": "failed",
                "error": "exit code 1",
                "result": {"exit_code": 1, "stdout": "", "stderr": "no"},
            },
            "Block 2 · shell.run · failed",
        ),
        (
            BlockOutcome(2, "files.read", "failed", None, "no such file: a.md"),
            {"block": 2, "tool": "files.read", "ok": False, "status": "failed", "error": "no such file: a.md"},
            "Block 2 · files.read · failed",
        ),
        (
            BlockOutcome(3, "files.write", "rejected", None, "files.write is denied"),
            {"block": 3, "tool": "files.write", "ok": False, "status": "rejected", "error": "files.write is denied"},
            "Block 3 · files.write · rejected",
        ),
        (
            BlockOutcome(4, "shell.run", "cancelled", None, "cancelled by an operator"),
            {"block": 4, "tool": "shell.run", "ok": False, "status": "cancelled", "error": "cancelled by an operator"},
            "Block 4 · shell.run · cancelled",
        ),
        (
            BlockOutcome(5, "echo", "cancelled"),
            {"block": 5, "tool": "echo", "ok": False, "status": "cancelled", "error": "no error message was recorded"},
            "Block 5 · echo · cancelled",
        ),
        (
            BlockOutcome(1, "laptop::shell.run", "succeeded", {"exit_code": 0}),
            {"block": 1, "tool": "laptop::shell.run", "ok": True, "result": {"exit_code": 0}},
            "Block 1 · laptop::shell.run · succeeded",
        ),
    ],
)
def test_each_outcome_is_reported_as_its_header_and_json(outcome, expected, header):
    text = render_results([outcome], max_chars=ROOMY)
    (parsed,) = parse_results(text)
    assert parsed == expected
    assert list(parsed) == list(expected)  # members in the documented order
    assert headers(text) == [header]
    assert outcome.ok is (outcome.status == "succeeded")


def test_the_rendering_matches_the_spec_layout():
    outcomes = [
        BlockOutcome(2, "files.write", "rejected", error="tool files.write is denied"),
        BlockOutcome(1, "files.read", "succeeded", {"text": "todo", "size": 4}),
    ]
    assert render_results(outcomes, max_chars=ROOMY) == (
        "Conductor results for 2 blocks (1 succeeded, 1 rejected)\n"
        "\n"
        "Block 1 · files.read · succeeded\n"
        "```baa-result\n"
        '{"block": 1, "tool": "files.read", "ok": true, "result": {"text": "todo", "size": 4}}\n'
        "```\n"
        "\n"
        "Block 2 · files.write · rejected\n"
        "```baa-result\n"
        '{"block": 2, "tool": "files.write", "ok": false, "status": "rejected", '
        '"error": "tool files.write is denied"}\n'
        "```"
    )


@pytest.mark.parametrize(
    "statuses,first_line",
    [
        (["succeeded"], "Conductor results for 1 block (1 succeeded)"),
        (["failed", "succeeded", "succeeded"], "Conductor results for 3 blocks (2 succeeded, 1 failed)"),
        (
            ["cancelled", "rejected", "failed", "succeeded"],
            "Conductor results for 4 blocks (1 succeeded, 1 failed, 1 rejected, 1 cancelled)",
        ),
    ],
)
def test_first_line_counts_the_outcomes_by_status(statuses, first_line):
    outcomes = [BlockOutcome(i, "echo", status, error="x") for i, status in enumerate(statuses, start=1)]
    assert render_results(outcomes, max_chars=ROOMY).split("\n")[0] == first_line


@pytest.mark.parametrize(
    "max_chars,expected",
    [
        (ROOMY, NO_BLOCKS),
        (len(NO_BLOCKS), NO_BLOCKS),
        (20, NO_BLOCKS[:19] + ELLIPSIS),
        (0, ""),
    ],
)
def test_no_outcomes_render_a_no_blocks_line(max_chars, expected):
    assert render_results([], max_chars=max_chars) == expected
    assert parse_results(NO_BLOCKS) == []


@pytest.mark.parametrize("order", [[3, 1, 2], [2, 3, 1], [1, 2, 3], [10, 2, 7]])
def test_blocks_are_rendered_in_block_order(order):
    outcomes = [BlockOutcome(n, "echo", "succeeded", {"n": n}) for n in order]
    text = render_results(outcomes, max_chars=ROOMY)
    assert [parsed["block"] for parsed in parse_results(text)] == sorted(order)
    assert headers(text) == [f"Block {n} · echo · succeeded" for n in sorted(order)]


@pytest.mark.parametrize(
    "result",
    [
        "日本語のテキスト 🎉👩‍👩‍👧",
        {"text": "naïve café — ünïcödé", "emoji": "🦀" * 20},
        ["中文", "한국어", "العربية"],
    ],
)
def test_unicode_is_kept_raw_and_counted_in_characters(result):
    outcome = BlockOutcome(1, "echo", "succeeded", result)
    text = render_results([outcome], max_chars=ROOMY)
    assert only(outcome)["result"] == result
    assert "\\u" not in text  # ensure_ascii=False: the chat shows the text itself
    assert len(text.encode()) > len(text)
    # The bound is in characters: a bound below the byte count but at the character count fits whole.
    assert render_results([outcome], max_chars=len(text)) == text


@pytest.mark.parametrize(
    "result",
    [
        "line one\n```\nline three",
        "\r\n```\r\n",
        "para\u2028```\u2029next\u0085```",
        {"key\n```": "\x0b\x0c\x1c\x1d\x1e```"},
        "lone surrogate \udcff from a bad decode",
    ],
)
def test_line_breaking_characters_cannot_close_the_fence(result):
    outcome = BlockOutcome(1, "echo", "succeeded", result)
    text = render_results([outcome], max_chars=ROOMY)
    assert is_fully_parsed(text, [outcome])
    assert len(text.splitlines()) == len(text.split("\n"))  # no line break of any kind inside the JSON
    text.encode("utf-8")  # lone surrogates are escaped, so the text can be sent
    assert only(outcome)["result"] == result


@pytest.mark.parametrize(
    "tool,header",
    [
        ("files.read\n```\nevil", "Block 1 · files.read ``` evil · rejected"),
        ("", "Block 1 · ? · rejected"),
        ("x" * 500, "Block 1 · " + "x" * 99 + ELLIPSIS + " · rejected"),
    ],
)
def test_a_rejected_header_is_shown_on_one_short_line(tool, header):
    outcome = BlockOutcome(1, tool, "rejected", error="bad header")
    text = render_results([outcome], max_chars=ROOMY)
    assert headers(text) == [header]
    assert is_fully_parsed(text, [outcome])


@pytest.mark.parametrize(
    "result,expected",
    [
        ({"when": datetime.date(2024, 5, 1)}, {"when": "2024-05-01"}),
        ({"nan": float("nan")}, "{'nan': nan}"),
        ({(1, 2): "tuple key"}, "{(1, 2): 'tuple key'}"),
    ],
)
def test_a_value_json_cannot_hold_is_rendered_without_raising(result, expected):
    assert only(BlockOutcome(1, "echo", "succeeded", result))["result"] == expected


@pytest.mark.parametrize("extra", [0, 1, 7])
def test_text_that_fits_exactly_is_not_truncated(extra):
    outcomes = [
        BlockOutcome(1, "files.read", "succeeded", {"text": "a" * 3000}),
        BlockOutcome(2, "shell.run", "failed", {"stdout": "b" * 2000}, "exit code 2"),
    ]
    whole = render_results(outcomes, max_chars=ROOMY)
    assert render_results(outcomes, max_chars=len(whole) + extra) == whole
    shorter = render_results(outcomes, max_chars=len(whole) - 1)
    assert len(shorter) == len(whole) - 1
    assert any(parsed.get("truncated") for parsed in parse_results(shorter))


def test_largest_result_is_truncated_first():
    big = {"text": "x" * 5000}
    small = [{"text": "s" * 40}, "t" * 300, [1, 2, 3]]
    outcomes = [BlockOutcome(i, "files.read", "succeeded", r) for i, r in enumerate([*small, big], start=1)]
    text = render_results(outcomes, max_chars=2000)
    assert len(text) == 2000  # the preview takes all the room left
    parsed = parse_results(text)
    assert [p["result"] for p in parsed[:3]] == small
    assert all("truncated" not in p for p in parsed[:3])
    preview = parsed[3]["result"]
    assert parsed[3]["truncated"] is True
    assert preview.endswith(ELLIPSIS) and json.dumps(big).startswith(preview[: -len(ELLIPSIS)])


def test_a_string_result_is_previewed_as_its_own_beginning():
    result = "line\n" * 2000
    (parsed,) = parse_results(render_results([BlockOutcome(1, "echo", "succeeded", result)], max_chars=500))
    assert result.startswith(parsed["result"][: -len(ELLIPSIS)])
    assert len(parsed["result"]) > 50


@pytest.mark.parametrize("max_chars,cut", [(1500, [0, 2, 3]), (3000, [0, 2, 3]), (8000, [0, 3])])
def test_several_large_results_share_the_room_evenly(max_chars, cut):
    # At 8000 cutting the two largest is enough, so the 6000-char result stays whole.
    results = [{"stdout": "a" * 9000}, "s" * 20, {"stdout": "b" * 6000}, {"stdout": "c" * 7000}]
    outcomes = [BlockOutcome(i, "shell.run", "succeeded", r) for i, r in enumerate(results, start=1)]
    text = render_results(outcomes, max_chars=max_chars)
    assert len(text) == max_chars
    parsed = parse_results(text)
    assert [i for i, p in enumerate(parsed) if p.get("truncated")] == cut
    assert all(parsed[i]["result"] == results[i] for i in range(4) if i not in cut)
    previews = [parsed[i]["result"] for i in cut]
    assert all(p.endswith(ELLIPSIS) for p in previews)
    assert max(map(len, previews)) - min(map(len, previews)) <= 1


def test_a_result_that_no_longer_needs_cutting_stays_whole():
    # Cutting the 9000-char result alone frees room enough for the 1500-char one.
    results = [{"stdout": "a" * 9000}, {"stdout": "b" * 1500}]
    outcomes = [BlockOutcome(i, "shell.run", "succeeded", r) for i, r in enumerate(results, start=1)]
    parsed = parse_results(render_results(outcomes, max_chars=2500))
    assert parsed[0]["truncated"] is True
    assert parsed[1]["result"] == results[1] and "truncated" not in parsed[1]


def test_errors_stay_whole_while_cutting_results_is_enough():
    outcomes = [
        BlockOutcome(1, "shell.run", "failed", {"stdout": "o" * 3000}, "e" * 3000),
        BlockOutcome(2, "echo", "succeeded", {"echo": "r" * 2000}),
    ]
    parsed = parse_results(render_results(outcomes, max_chars=4500))
    assert parsed[0]["error"] == "e" * 3000
    assert parsed[0]["result"].endswith(ELLIPSIS) and parsed[1]["result"].endswith(ELLIPSIS)


@pytest.mark.parametrize("max_chars", [900, 2000, 5000])
def test_errors_too_large_are_cut_after_every_result(max_chars):
    outcomes = [
        BlockOutcome(1, "shell.run", "failed", {"stdout": "o" * 3000}, "E" * 9000),
        BlockOutcome(2, "echo", "succeeded", {"echo": "r" * 2000}),
        BlockOutcome(3, "files.read", "failed", None, "short error"),
    ]
    text = render_results(outcomes, max_chars=max_chars)
    assert len(text) == max_chars
    first, second, third = parse_results(text)
    assert first["result"] == second["result"] == ELLIPSIS
    assert first["error"].startswith("EEE") and first["error"].endswith(ELLIPSIS)
    assert first["truncated"] is second["truncated"] is True
    assert third["error"] == "short error" and "truncated" not in third


def shows_a_prefix(text, outcomes, max_chars):
    """The text fits; it shows the first blocks, each valid JSON, and a last line counting the others."""
    assert len(text) <= max_chars
    numbers = sorted(outcome.block for outcome in outcomes)
    shown = [parsed["block"] for parsed in parse_results(text)]
    assert shown == numbers[: len(shown)]
    assert is_fully_parsed(text, outcomes[: len(shown)])
    left_out = numbers[len(shown):]
    within = f"to keep this message within {max_chars} characters."
    if left_out and shown:
        assert text.endswith(
            f"Left out: the outcome of block {left_out[0]}, {within}" if len(left_out) == 1
            else f"Left out: the outcomes of blocks {left_out[0]} to {left_out[-1]} ({len(left_out)} blocks), {within}"
        )
    elif left_out:
        assert "```" not in text  # the first line and the left-out line, cut to the cap if need be
    return len(shown)


THREE = [
    BlockOutcome(1, "files.read", "succeeded", {"text": "x" * 500}),
    BlockOutcome(2, "shell.run", "failed", {"stdout": "y" * 500}, "z" * 500),
    BlockOutcome(3, "echo", "succeeded", {"a": 1}),
]


def test_below_the_minimal_rendering_the_first_blocks_are_shown_and_the_rest_counted():
    text = render_results(THREE, max_chars=284)
    assert text == (
        "Conductor results for 3 blocks (2 succeeded, 1 failed)\n"
        "\n"
        "Block 1 · files.read · succeeded\n"
        "```baa-result\n"
        '{"block": 1, "tool": "files.read", "ok": true, "result": "…", "truncated": true}\n'
        "```\n"
        "\n"
        "Left out: the outcomes of blocks 2 to 3 (2 blocks), to keep this message within 284 characters."
    )


@pytest.mark.parametrize(
    "max_chars,shown,length",
    [
        (500, 3, 500),  # the minimal rendering fits: every block, values shared as usual
        (457, 3, 457),  # ... exactly
        (456, 2, 456),  # it does not: blocks 1 and 2 (no block fits with 200-character previews)
        (427, 1, 427),  # block 1 alone, its result sharing the room left
        (284, 1, 284),  # block 1 at its minimal rendering
        (283, 0, 151),  # not one block fits: the first line and the left-out line
        (150, 0, 150),  # ... cut to the cap
        (1, 0, 1),
        (0, 0, 0),
        (-5, 0, 0),
    ],
)
def test_the_cap_holds_however_small(max_chars, shown, length):
    text = render_results(THREE, max_chars=max_chars)
    assert (len(text), len(parse_results(text))) == (length, shown)
    assert shows_a_prefix(text, THREE, max(max_chars, 0)) == shown
    if 0 < shown < 3:
        assert '"truncated": true' in text


def test_when_blocks_are_left_out_the_ones_shown_keep_previews_worth_reading():
    outcomes = [BlockOutcome(n, "files.read", "succeeded", {"text": f"{n} " + "x" * 5000}) for n in range(1, 200)]
    text = render_results(outcomes, max_chars=20_000)
    count = shows_a_prefix(text, outcomes, 20_000)
    assert 50 < count < 199
    previews = [parsed["result"] for parsed in parse_results(text)]
    assert all(preview.endswith(ELLIPSIS) and 150 < len(preview) <= PREVIEW_WHEN_LEAVING_OUT for preview in previews)
    assert all(preview.startswith(f'{{"text": "{n} xxx') for n, preview in enumerate(previews, start=1))


def many(count, make):
    return [make(n) for n in range(1, count + 1)]


SHAPES = {
    # What a message of thousands of blocks came to before ingest capped blocks at 32.
    "rejected": lambda n: BlockOutcome(
        n, "", "rejected", error=f"too many blocks: a message may hold at most 32; this is block {n}"
    ),
    "small results": lambda n: BlockOutcome(n, "echo", "succeeded", {"n": n}),
    "large results": lambda n: BlockOutcome(n, "files.read", "succeeded", {"text": "x" * 3000}),
    "failures with output": lambda n: BlockOutcome(n, "shell.run", "failed", {"stdout": "o" * 400}, "e" * 300),
    "long headers": lambda n: BlockOutcome(n, "t" * 500, "s" * 500, error="bad header"),
    "mixed": lambda n: [
        BlockOutcome(n, "echo", "succeeded", {"n": n}),
        BlockOutcome(n, "files.read", "succeeded", "日本語🎉\u2028" * 300),
        BlockOutcome(n, "laptop::shell.run", "cancelled"),
        BlockOutcome(n, "files.write", "rejected", error="files.write is denied by policy"),
    ][n % 4],
}


@pytest.mark.parametrize("shape", SHAPES)
def test_the_cap_holds_for_5000_blocks(shape):
    outcomes = many(5000, SHAPES[shape])
    text = render_results(outcomes, max_chars=20_000)
    assert 0 < shows_a_prefix(text, outcomes, 20_000) < 5000
    assert text.startswith("Conductor results for 5000 blocks (")  # the first line still counts them all


def rendering_steps(outcomes, max_chars):
    """The Python calls made in pipelines/results_text.py while rendering: its work, counted without a clock."""
    steps = 0

    def count(frame, event, arg):
        nonlocal steps
        if event == "call" and frame.f_code.co_filename == results_text.__file__:
            steps += 1

    previous = sys.getprofile()
    sys.setprofile(count)
    try:
        render_results(outcomes, max_chars=max_chars)
    finally:
        sys.setprofile(previous)
    return steps


@pytest.mark.parametrize("cap", ["20000", "a third of the whole"])
@pytest.mark.parametrize("shape", SHAPES)
def test_rendering_work_grows_linearly_with_the_blocks(shape, cap):
    def steps(count):
        outcomes = many(count, SHAPES[shape])
        max_chars = 20_000 if cap == "20000" else len(render_results(outcomes, max_chars=ROOMY)) // 3
        return rendering_steps(outcomes, max_chars)

    # Four times the blocks, four times the work, give or take the sort; quadratic work would be sixteen.
    assert steps(4000) <= 1.25 * 4 * steps(1000)


ALPHABET = "abc xyz 0123456789 \"\\/\n\t\r\x00\x1f é日本🎉\u2028\u0085```{}[]"


def random_text(rng, size):
    return "".join(rng.choices(ALPHABET, k=size))


def random_value(rng):
    size = rng.choice([0, 1, 5, 30, 200, 1000, 4000])
    shapes = [
        lambda: None,
        lambda: random_text(rng, size),
        lambda: {"text": random_text(rng, size), "size": size, "truncated": False},
        lambda: [random_text(rng, 5) for _ in range(size // 10)],
        lambda: {"exit_code": 1, "stdout": random_text(rng, size), "stderr": random_text(rng, size // 3)},
    ]
    return rng.choice(shapes)()


def random_outcome(rng, block):
    status = rng.choice(["succeeded", "succeeded", "failed", "rejected", "cancelled"])
    error = None if status == "succeeded" else rng.choice([None, random_text(rng, rng.choice([3, 40, 800, 3000]))])
    result = random_value(rng) if status in ("succeeded", "failed") else None
    return BlockOutcome(block, rng.choice(["echo", "files.read", "laptop::shell.run"]), status, result, error)


def test_random_outcomes_fit_whenever_they_can_and_always_parse():
    rng = random.Random(20240501)
    for _ in range(400):
        outcomes = [random_outcome(rng, block) for block in rng.sample(range(1, 33), rng.randint(1, 6))]
        whole = render_results(outcomes, max_chars=ROOMY)
        max_chars = rng.randint(0, len(whole) + 50)

        text = render_results(outcomes, max_chars=max_chars)

        shown = shows_a_prefix(text, outcomes, max_chars)
        if len(whole) <= max_chars:
            assert text == whole
        elif shown == len(outcomes):
            # As close as the previews allow: a cut cannot split an escape (\u2028 takes 6 characters),
            # and a value found short enough to keep whole after all may drop its block's "truncated".
            assert max_chars - len(text) <= 5 + len(', "truncated": true')
        by_block = {outcome.block: outcome for outcome in outcomes}
        for parsed in parse_results(text):
            outcome = by_block[parsed["block"]]
            for key, original in (("result", outcome.result), ("error", outcome.error or NO_ERROR_MESSAGE)):
                if key not in parsed:
                    continue
                kept_whole = parsed[key] == json.loads(json.dumps(original))
                assert kept_whole or (parsed["truncated"] is True and parsed[key].endswith(ELLIPSIS))


pieces = st.text(alphabet=ALPHABET, max_size=6)
sized_texts = st.builds(lambda piece, times: piece * times, pieces, st.sampled_from([0, 1, 10, 100, 1000]))
values = st.one_of(
    st.none(),
    sized_texts,
    st.integers(),
    st.builds(lambda text, size: {"text": text, "size": size}, sized_texts, st.integers()),
)
outcome_fields = st.tuples(
    st.sampled_from(["echo", "files.read", "laptop::shell.run", "", "x" * 300]),
    st.sampled_from(["succeeded", "failed", "rejected", "cancelled", "unheard-of"]),
    values,
    st.one_of(st.none(), sized_texts),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(outcome_fields, min_size=1, max_size=300), st.integers(-10, 40_000), st.randoms(use_true_random=False))
def test_any_outcomes_fit_any_cap_and_every_block_shown_parses(fields, max_chars, rng):
    numbers = list(range(1, len(fields) + 1))
    rng.shuffle(numbers)
    outcomes = [BlockOutcome(n, *outcome) for n, outcome in zip(numbers, fields, strict=True)]

    text = render_results(outcomes, max_chars=max_chars)

    shows_a_prefix(text, outcomes, max(max_chars, 0))
    text.encode("utf-8")


@pytest.mark.parametrize(
    "text,expected",
    [
        ('```baa-result\n{"block": 1}\n```', [{"block": 1}]),
        ('```baa-result\r\n{"block": 1}\r\n```\r\n', [{"block": 1}]),
        ('```baa\necho\n```\n```baa-result\n{"block": 2}\n```', [{"block": 2}]),
        ("no fences at all", []),
    ],
)
def test_parse_results_reads_only_result_blocks(text, expected):
    assert parse_results(text) == expected


def test_parse_results_refuses_a_block_that_is_not_json():
    with pytest.raises(json.JSONDecodeError):
        parse_results("```baa-result\n{not json\n```")
