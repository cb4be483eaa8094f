import html
import json
import re
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from ingest import blocks as blocks_module
from ingest.blocks import MAX_BLOCK_BYTES, MAX_BLOCKS, MAX_NESTING, parse_blocks
from ingest.jsoncheck import loads_checked


def only(text):
    blocks = parse_blocks(text)
    assert len(blocks) == 1, blocks
    return blocks[0]


@pytest.mark.parametrize(
    "text,target,tool,params",
    [
        ('```baa\nfiles.read\n{"path": "notes/todo.md"}\n```', "conductor", "files.read", {"path": "notes/todo.md"}),
        ("```baa\ntime.now\n```", "conductor", "time.now", {}),
        ("```baa\ntime.now\n   \n\n```", "conductor", "time.now", {}),
        ("```baa\n\n  echo  \n{}\n```", "conductor", "echo", {}),
        ('```baa\nlaptop::shell.run\n{"argv": ["ls"]}\n```', "laptop", "shell.run", {"argv": ["ls"]}),
        ('~~~baa\necho\n{"a": 1}\n~~~', "conductor", "echo", {"a": 1}),
        ('````baa\necho\n{"s": "```"}\n````', "conductor", "echo", {"s": "```"}),
        ('```baa\necho\n{"s": 1}\n`````', "conductor", "echo", {"s": 1}),  # longer closing fence
        ("```baa   \necho\n```  ", "conductor", "echo", {}),  # trailing spaces on both fences
        ("``` baa\necho\n```", "conductor", "echo", {}),  # info string is trimmed
        ("   ```baa\n   echo\n   ```", "conductor", "echo", {}),  # indented three spaces
        ('```baa\r\necho\r\n{"crlf": true}\r\n```\r\n', "conductor", "echo", {"crlf": True}),
        ('```baa\necho\n{\n  "multi": [1,\n 2]\n}\n```', "conductor", "echo", {"multi": [1, 2]}),
        ('```baa\necho\n{"emoji": "日本語 🎉"}\n```', "conductor", "echo", {"emoji": "日本語 🎉"}),
        ('```baa\nmy-tool_2.x\n```', "conductor", "my-tool_2.x", {}),
    ],
)
def test_valid_blocks(text, target, tool, params):
    block = only(text)
    assert block.error == ""
    assert (block.target, block.tool, block.params) == (target, tool, params)


@pytest.mark.parametrize(
    "text,error",
    [
        ("```baa\n```", "empty block"),
        ("```baa\n   \n```", "empty block"),
        ("```baa\nFiles.Read\n```", "bad header 'Files.Read'"),
        ("```baa\nfiles read\n```", "bad header 'files read'"),
        ("```baa\na::b::c\n```", "bad header 'a::b::c'"),
        ("```baa\n::echo\n```", "bad header '::echo'"),
        ("```baa\n9lives\n```", "bad header '9lives'"),
        ('```baa\necho\n{"a": 1,}\n```', "params are not valid JSON: Expecting property name enclosed in double quotes (line 3, column 9)"),
        ('text\n\n```baa\necho\n{\n  "a": 1\n  "b": 2\n}\n```', "params are not valid JSON: Expecting ',' delimiter (line 7, column 3)"),
        ('```baa\necho\n{"a": 1} {"b": 2}\n```', "params are not valid JSON: Extra data (line 3, column 10)"),
        ('```baa\necho\n{"%s": 1, "%s": 2}\n```' % ("k" * 5000, "k" * 5000),
         f"params are not valid JSON: duplicate key '{'k' * 80}'…"),
        ("```baa\necho\n[1, 2]\n```", "params must be one JSON object, got an array"),
        ('```baa\necho\n"path"\n```', "params must be one JSON object, got a string"),
        ("```baa\necho\n42\n```", "params must be one JSON object, got a number"),
        ("```baa\necho\nnull\n```", "params must be one JSON object, got null"),
        ('```baa\necho\n{"a": 1, "a": 2}\n```', "params are not valid JSON: duplicate key 'a'"),
        ('```baa\necho\n{"a": NaN}\n```', "params cannot be taken: NaN is not a number JSON allows"),
        ('```baa\necho\n{"a": -Infinity}\n```', "params cannot be taken: -Infinity is not a number JSON allows"),
        # An assistant can write this; it must come back as an error it can act on.
        ('```baa\necho\n{"a": 1e999}\n```', "params cannot be taken: 1e999 is not a finite number"),
        ('```baa\necho\n{"a": "\\ud800"}\n```', "params cannot be taken: a string holds a lone surrogate"),
        ('```baa\necho\n{"a": ' + "9" * 4301 + "}\n```", "params cannot be taken: a number has more than 100 digits"),
        ("```baa\necho\n{'a': 1}\n```", "params are not valid JSON: Expecting property name"),
        ("```baa\necho\n" + "[" * 50000 + "\n```", "params cannot be taken: nested deeper than 100 levels"),
        ('```baa\necho\n{"a": ' + "[" * 100 + "]" * 100 + "}\n```", "nested deeper than 100 levels"),
    ],
)
def test_broken_blocks_are_reported_with_a_precise_error(text, error):
    block = only(text)
    assert error in block.error
    assert not block.is_valid
    assert block.params is None


@pytest.mark.parametrize(
    "text",
    [
        "```python\n```baa\necho\n```\n```",  # inside a backtick fence: the inner ``` closes the outer
        "````\n```baa\necho\n```\n````",  # inside a longer fence
        "~~~\n```baa\necho\n```\n~~~",  # inside a tilde fence
        "```md\n~~~baa\necho\n~~~\n```",
        "```baa\necho\n",  # unclosed
        "```baa\necho\n~~~",  # closed by the wrong character
        "````baa\necho\n```",  # closed by a shorter fence
        "```baa\necho\n``` x",  # text after the closing fence: not a close
        "```\nunclosed\n```baa\necho\n```",  # the unclosed-looking outer fence is closed by ```baa? no: info string, so content
        "    ```baa\n    echo\n    ```",  # four spaces: indented code, not a fence
        "```baa-result\n{}\n```",
        "```BAA\necho\n```",
        "```baa extra\necho\n```",
        "``baa\necho\n``",
        "text ```baa\necho\n```",
    ],
)
def test_not_blocks(text):
    assert [b for b in parse_blocks(text) if b.tool == "echo"] == []


def test_blocks_keep_message_order_and_line_numbers():
    text = "Intro\n```baa\necho\n{\"n\": 1}\n```\nmiddle\n```python\nprint()\n```\n~~~baa\ntime.now\n~~~\n"
    blocks = parse_blocks(text)
    assert [(b.index, b.line, b.tool) for b in blocks] == [(1, 2, "echo"), (2, 10, "time.now")]


def test_the_raw_text_is_the_content_between_the_fences():
    assert only('```baa\necho\n{"a": 1}\n```').raw_text == 'echo\n{"a": 1}'


def echo_blocks(count):
    """``count`` valid blocks of four lines each, so block ``n`` opens on line ``4n - 3``."""
    return "\n".join(f"```baa\necho\n{{\"n\": {n}}}\n```" for n in range(1, count + 1))


@pytest.mark.parametrize(
    "text,kept_errors,overflow",
    [
        pytest.param(echo_blocks(MAX_BLOCKS), [""] * 32, None, id="at-the-limit"),
        pytest.param(
            echo_blocks(MAX_BLOCKS + 1), [""] * 32,
            "too many blocks: a message may hold at most 32; 1 more block from line 129 was ignored",
            id="one-past",
        ),
        pytest.param(
            echo_blocks(MAX_BLOCKS + 3), [""] * 32,
            "too many blocks: a message may hold at most 32; 3 more blocks from line 129 on were ignored",
            id="three-past",
        ),
        # An empty block is a rejected block, and still counts towards the limit.
        pytest.param(
            "~~~baa\n~~~\n" * 80_000, ["empty block: its first line must name a tool, e.g. files.read"] * 32,
            "too many blocks: a message may hold at most 32; 79968 more blocks from line 65 on were ignored",
            id="80000-empty-blocks",
        ),
        # Fences that are not baa blocks (another info string, or unclosed) are not counted.
        pytest.param(
            echo_blocks(MAX_BLOCKS) + "\n```python\n```\n```baa\necho\n```\n```baa\necho\n", [""] * 32,
            "too many blocks: a message may hold at most 32; 1 more block from line 131 was ignored",
            id="other-and-unclosed-fences-not-counted",
        ),
    ],
)
def test_blocks_past_the_limit_become_one_rejection_counting_them(text, kept_errors, overflow):
    blocks = parse_blocks(text)
    assert [b.error for b in blocks[:MAX_BLOCKS]] == kept_errors
    assert [b.index for b in blocks[:MAX_BLOCKS]] == list(range(1, 33))
    if overflow is None:
        assert len(blocks) == MAX_BLOCKS
        return
    assert len(blocks) == MAX_BLOCKS + 1
    last = blocks[-1]
    assert (last.index, last.error, last.raw_text, last.tool, last.params) == (33, overflow, "", "", None)


def test_blocks_past_the_limit_are_counted_without_being_built_or_parsed(monkeypatch):
    built, decoded = [], []

    class CountedBlock(blocks_module.Block):
        def __init__(self, *args, **kwargs):
            built.append(kwargs.get("index"))
            super().__init__(*args, **kwargs)

    def counted_loads(*args, **kwargs):
        decoded.append(1)
        return loads_checked(*args, **kwargs)

    monkeypatch.setattr(blocks_module, "Block", CountedBlock)
    monkeypatch.setattr(blocks_module, "loads_checked", counted_loads)

    blocks = parse_blocks('~~~baa\necho\n{"n": 1}\n~~~\n' * 80_000)

    assert len(blocks) == MAX_BLOCKS + 1
    assert "79968 more blocks" in blocks[-1].error
    assert built == list(range(1, MAX_BLOCKS + 2))
    assert len(decoded) == MAX_BLOCKS


def test_a_block_over_64_kib_is_rejected_saying_so():
    big = "x" * MAX_BLOCK_BYTES
    block = only(f'```baa\necho\n{{"s": "{big}"}}\n```')
    assert block.error == f"block is {MAX_BLOCK_BYTES + 14} bytes; the limit is 65536 bytes per block"


def test_a_block_of_exactly_64_kib_is_accepted():
    big = "x" * (MAX_BLOCK_BYTES - 14)
    assert only(f'```baa\necho\n{{"s": "{big}"}}\n```').is_valid


def test_size_counts_utf8_bytes():
    text = '```baa\necho\n{"s": "' + "é" * (MAX_BLOCK_BYTES // 2) + '"}\n```'
    assert "the limit is 65536" in only(text).error


# --- properties ---------------------------------------------------------------

@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("`~ \n\r\tbaa{}[]\":,echo.:x1é>-*+)")), max_size=400))
def test_never_raises_on_fence_heavy_text(text):
    for block in parse_blocks(text):
        assert block.is_valid or block.error


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_never_raises_on_any_text(text):
    parse_blocks(text)


names = st.from_regex(r"\A[a-z][a-z0-9_.-]{0,10}\Z")
params = st.dictionaries(st.text(alphabet="abcxyz", min_size=1, max_size=5), st.integers(), max_size=3)
plain = st.lists(
    st.text(alphabet="abc xyz.,!\n", max_size=40).filter(lambda s: "`" not in s and "~" not in s),
    max_size=2,
).map(lambda parts: "\n".join(p.strip("\n") for p in parts))


@st.composite
def baa_block(draw):
    char = draw(st.sampled_from("`~"))
    fence = char * draw(st.integers(3, 5))
    tool = draw(names)
    body = json.dumps(draw(params))
    return ("baa", tool, f"{fence}baa\n{tool}\n{body}\n{fence}")


@st.composite
def other_fence_hiding_a_block(draw):
    _, _, inner = draw(baa_block())
    longest = max(len(run) for run in inner.replace("~", "`").split("\n") if set(run) == {"`"})
    char = draw(st.sampled_from("`~"))
    # A fence that only a longer run of its own character can close.
    fence = char * (longest + draw(st.integers(1, 2)))
    info = draw(st.sampled_from(["", "python", "md", "text"]))
    return ("hidden", None, f"{fence}{info}\n{inner}\n{fence}")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(baa_block(), other_fence_hiding_a_block(), plain.map(lambda t: ("text", None, t))), max_size=8))
def test_finds_exactly_the_top_level_blocks_and_none_inside_other_fences(segments):
    text = "\n".join(segment for _, _, segment in segments)
    expected = [tool for kind, tool, _ in segments if kind == "baa"]
    blocks = parse_blocks(text)
    assert [b.tool for b in blocks] == expected
    assert all(b.is_valid for b in blocks)


def test_a_block_with_broken_params_still_names_its_tool():
    block = only('```baa\nlaptop::files.read\n{"path": }\n```')
    assert (block.target, block.tool, block.is_valid) == ("laptop", "files.read", False)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.one_of(baa_block(), baa_block(), other_fence_hiding_a_block()), min_size=25, max_size=45))
def test_never_more_than_the_limit_and_one_rejection_counting_the_rest(segments):
    text = "\n".join(segment for _, _, segment in segments)
    expected = [tool for kind, tool, _ in segments if kind == "baa"]
    blocks = parse_blocks(text)
    assert [b.tool for b in blocks[:MAX_BLOCKS]] == expected[:MAX_BLOCKS]
    ignored = len(expected) - MAX_BLOCKS
    if ignored <= 0:
        assert len(blocks) == len(expected)
    else:
        assert len(blocks) == MAX_BLOCKS + 1
        assert f"; {ignored} more block" in blocks[-1].error


# --- messages shaped like an assistant's, with hostile blocks ---------------------

# What a block's body may hold: JSON of any shape, broken JSON, duplicate keys,
# non-finite or long numbers, lone surrogate escapes, deep nesting, prose.
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)
bodies = st.one_of(
    json_values.map(json.dumps),
    st.text(max_size=80),
    st.builds(lambda key, a, b: f'{{"{key}": {a}, "{key}": {b}}}', st.builds(str.__mul__, st.sampled_from("ké "), st.integers(1, 3000)),
              st.integers(), st.integers()),
    st.sampled_from(["NaN", "{\"n\": Infinity}", '{"n": 1e999}', '{"s": "\\ud800"}', "{\"n\": " + "9" * 300 + "}"]),
    st.integers(1, 3000).map(lambda depth: '{"a": ' + "[" * depth + "]" * depth + "}"),
    st.integers(1, 3).map(lambda n: '{"s": "' + "x" * (MAX_BLOCK_BYTES * n // 2) + '"}'),
)
headers = st.one_of(names, st.sampled_from(["", "Files.Read", "a::b::c", "::echo", "laptop::shell.run"]), st.text(max_size=30))


@st.composite
def assistant_segment(draw):
    """A paragraph, or a fence as assistants write them: baa or not, closed or not, nested, in a list or a quote."""
    fence = draw(st.sampled_from("`~")) * draw(st.integers(3, 6))
    body = f"{draw(headers)}\n{draw(bodies)}"
    kind = draw(st.sampled_from(["prose", "baa", "baa", "unclosed", "other", "nested", "item", "quote"]))
    if kind == "prose":
        return draw(st.text(max_size=120))
    block = f"{fence}baa\n{body}\n{fence}"
    return {
        "baa": block,
        "unclosed": f"{fence}baa\n{body}",
        "other": f"{fence}{draw(st.sampled_from(['python', 'json', '']))}\n{body}\n{fence}",
        "nested": f"{fence}`````~~~~~~md\n{block}\n{fence}`````~~~~~~",
        "item": "3. Step:\n" + "\n".join("   " + line for line in block.split("\n")),
        "quote": "\n".join("> " + line for line in block.split("\n")),
    }[kind]


# Up to hundreds of blocks: a message of a few segments, a short one repeated many times.
assistant_messages = st.lists(
    st.tuples(assistant_segment(), st.sampled_from([1, 1, 1, 2, 5, 300])), max_size=5,
).map(lambda parts: "\n\n".join("\n\n".join([segment] * (times if len(segment) < 300 else 1))
                                 for segment, times in parts))


def check_bounded(blocks):
    """What SPEC §5 bounds: at most 32 blocks and one rejection for the rest; each valid block within 64 KiB."""
    assert len(blocks) <= MAX_BLOCKS + 1
    assert [b.index for b in blocks] == list(range(1, len(blocks) + 1))
    assert [b.line for b in blocks] == sorted(b.line for b in blocks)
    for block in blocks:
        assert block.is_valid != bool(block.error)
        assert len(block.error) <= 300, block.error[:400]
        if block.is_valid:
            assert len(block.raw_text.encode("utf-8")) <= MAX_BLOCK_BYTES
            assert isinstance(block.params, dict) and blocks_module.HEADER_RE.match(block.tool)
    if len(blocks) > MAX_BLOCKS:
        assert blocks[-1].raw_text == "" and blocks[-1].error.startswith("too many blocks")


@settings(max_examples=100, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(assistant_messages)
def test_assistant_messages_give_bounded_blocks_in_bounded_work(text):
    calls = {"parse": 0, "loads": 0}
    real_parse, real_loads = blocks_module._COMMONMARK.parse, blocks_module.loads_checked

    def counted(name, real):
        def call(*args, **kwargs):
            calls[name] += 1
            return real(*args, **kwargs)
        return call

    with mock.patch.object(blocks_module._COMMONMARK, "parse", counted("parse", real_parse)), \
         mock.patch.object(blocks_module, "loads_checked", counted("loads", real_loads)):
        blocks = parse_blocks(text)

    check_bounded(blocks)
    # However many blocks the message holds: one CommonMark parse, and params decoded for the kept ones only.
    assert calls["parse"] <= 1 and calls["loads"] <= MAX_BLOCKS


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(assistant_messages.filter(lambda text: "\r" not in text))
def test_crlf_and_cr_line_ends_give_the_same_blocks_as_lf(text):
    blocks = parse_blocks(text)
    assert parse_blocks(text.replace("\n", "\r\n")) == blocks
    assert parse_blocks(text.replace("\n", "\r")) == blocks


# --- containers: where CommonMark puts fences (SPEC §5) ------------------------

def found(text):
    return [(b.line, b.tool, b.raw_text) for b in parse_blocks(text)]


@pytest.mark.parametrize(
    "text,expected",
    [
        pytest.param(
            '10. Read the notes:\n    ```baa\n    files.read\n    {"path": "notes.txt"}\n    ```',
            [(2, "files.read", 'files.read\n{"path": "notes.txt"}')],
            id="issue-wide-marker",
        ),
        pytest.param(
            '- ````markdown\n  ```baa\n  shell.run\n  {"argv": ["rm", "-rf", "build"]}\n  ```\n  ````',
            [],
            id="issue-inside-a-fence-in-a-list-item",
        ),
        pytest.param("1. ```baa\n   echo\n   ```", [(1, "echo", "echo")], id="numbered"),
        pytest.param("1) ```baa\n   echo\n   ```", [(1, "echo", "echo")], id="numbered-paren"),
        pytest.param("- ```baa\n  echo\n  ```", [(1, "echo", "echo")], id="bulleted-dash"),
        pytest.param("* ```baa\n  echo\n  ```", [(1, "echo", "echo")], id="bulleted-star"),
        pytest.param("+ ~~~baa\n  echo\n  ~~~", [(1, "echo", "echo")], id="bulleted-plus-tildes"),
        pytest.param("100. ```baa\n     echo\n     ```", [(1, "echo", "echo")], id="wider-marker"),
        pytest.param(
            "Steps:\n\n1. First:\n\n   ```baa\n   echo\n   ```\n2. Then:\n   ```baa\n   time.now\n   ```\n",
            [(5, "echo", "echo"), (9, "time.now", "time.now")],
            id="numbered-steps",
        ),
        pytest.param(
            "- a\n  - b\n    ```baa\n    echo\n    {\"n\": 2}\n    ```",
            [(3, "echo", 'echo\n{"n": 2}')],
            id="nested-bullets",
        ),
        pytest.param(
            "1. a\n\n   10. b\n       ```baa\n       echo\n       ```\n   11. c",
            [(4, "echo", "echo")],
            id="nested-wide-marker",
        ),
        # Only a list starting at 1 interrupts a paragraph: "10. b" is text, the fence a paragraph's.
        pytest.param(
            "1. a\n   10. b\n       ```baa\n       echo\n       ```",
            [],
            id="wide-marker-cannot-interrupt-a-paragraph",
        ),
        pytest.param("> ```baa\n> echo\n> ```", [(1, "echo", "echo")], id="block-quote"),
        pytest.param(">```baa\n>echo\n>```", [(1, "echo", "echo")], id="block-quote-no-space"),
        pytest.param("> > ```baa\n> > echo\n> > ```", [(1, "echo", "echo")], id="nested-quotes"),
        pytest.param("- > ```baa\n  > echo\n  > ```", [(1, "echo", "echo")], id="quote-in-a-list"),
        pytest.param("> 1. ```baa\n>    echo\n>    ```", [(1, "echo", "echo")], id="list-in-a-quote"),
        pytest.param(
            "1. Run:\n   > ```baa\n   > echo\n   > {\"q\": true}\n   > ```",
            [(2, "echo", 'echo\n{"q": true}')],
            id="quote-in-a-list-under-text",
        ),
        # Unclosed: CommonMark ends the fence with its container; not a block.
        pytest.param("- ```baa\n  echo\n- next", [], id="item-ends-at-next-item"),
        pytest.param("- ```baa\n  echo\n\nafter", [], id="item-ends-at-paragraph"),
        pytest.param("1. ```baa\n   echo\n2. ```baa\n   time.now\n   ```", [(3, "time.now", "time.now")],
                     id="first-item-unclosed-second-closed"),
        pytest.param("- ```baa\n  echo\n```", [], id="closing-line-outside-the-item"),
        pytest.param("-   ```baa\n    echo\n  ```", [], id="closing-line-left-of-the-content"),
        pytest.param("> ```baa\n> echo\nlazy\n> ```", [], id="quote-ends-at-unquoted-line"),
        pytest.param("> ```baa\n> echo\n\n> ```", [], id="quote-ends-at-blank-line"),
        pytest.param("- > ```baa\n  > echo\n- ```", [], id="quote-in-item-ends-with-item"),
        pytest.param("- ```baa\n  echo\n", [], id="item-ends-at-end-of-text"),
        pytest.param("- ```baa\n  echo\n  ", [], id="item-ends-at-blank-last-line"),
        # Closing fences indented inside items: up to three spaces past the item's content.
        pytest.param("1. ```baa\n   echo\n      ```\n", [(1, "echo", "echo")], id="closer-indented-three"),
        pytest.param(
            "- ```baa\n  echo\n      ```\n  ```", [(1, "echo", "echo\n    ```")], id="closer-indented-four-is-content",
        ),
        pytest.param("- ```baa\n  echo\n      ```", [], id="only-a-four-space-closer-is-unclosed"),
        pytest.param("-  ```baa\n   echo\n  ```\n", [], id="closer-left-of-the-item-ends-it"),
        pytest.param(" -  ```baa\n     echo\n    ```", [(1, "echo", " echo")], id="content-indented-past-the-item"),
        pytest.param("- a\n\n   ```baa\n    echo\n   ```", [(3, "echo", " echo")], id="opener-indented-in-the-item"),
        # Tildes and backticks.
        pytest.param("- ```baa\n  echo\n  ~~~", [], id="backticks-not-closed-by-tildes"),
        pytest.param("- ~~~baa\n  echo\n  ```\n  ~~~", [(1, "echo", "echo\n```")], id="tildes-hold-backticks"),
        pytest.param("- ````baa\n  echo\n  ```\n  `````", [(1, "echo", "echo\n```")], id="shorter-run-is-content"),
        # Not a block at any nesting: content of another fence, code, or HTML.
        pytest.param("> ~~~\n> ```baa\n> echo\n> ```\n> ~~~", [], id="fence-in-a-quoted-fence"),
        pytest.param("````\n> ```baa\n> echo\n> ```\n````", [], id="quote-inside-a-fence"),
        pytest.param("- ~~~md\n  > ```baa\n  > echo\n  > ```\n  ~~~", [], id="quote-in-a-fence-in-an-item"),
        pytest.param("- ```md\n\n  ```baa\n  echo\n  ```", [], id="md-fence-closed-by-the-baa-line-info-so-content"),
        pytest.param("-     ```baa\n      echo\n      ```", [], id="indented-code-in-an-item"),
        pytest.param(">     ```baa\n>     echo\n>     ```", [], id="indented-code-in-a-quote"),
        pytest.param("<pre>\n```baa\necho\n```\n</pre>", [], id="html-block"),
        # CRLF and lone CR line ends.
        pytest.param('1. ```baa\r\n   echo\r\n   {"a": 1}\r\n   ```\r\n', [(1, "echo", 'echo\n{"a": 1}')], id="crlf"),
        pytest.param("> ```baa\r> echo\r> ```\r", [(1, "echo", "echo")], id="lone-cr"),
        # Bodies as CommonMark gives them: tabs expanded as far as the container takes.
        pytest.param("- ```baa\n\techo\n  ```", [(1, "echo", "  echo")], id="tab-partly-expanded"),
        pytest.param(">\t```baa\n>\techo\n>\t```", [(1, "echo", "echo")], id="tab-after-quote-marker"),
    ],
)
def test_blocks_in_containers(text, expected):
    assert found(text) == expected


@pytest.mark.parametrize(
    "text,error",
    [
        pytest.param('1. Step\n   ```baa\n   echo\n   {"a": 1,}\n   ```',
                     "Expecting property name enclosed in double quotes (line 4, column 12)", id="list-item"),
        pytest.param('> ```baa\n> echo\n> {"a" 1}\n> ```', "Expecting ':' delimiter (line 3, column 8)", id="quote"),
        pytest.param('Intro\n\n- > ```baa\n  > echo\n  > {\n  >   "a": 1\n  >   "b": 2\n  > }\n  > ```',
                     "Expecting ',' delimiter (line 7, column 7)", id="quote-in-item"),
        pytest.param('- ```baa\n  echo\n \t{"a" 1}\n  ```', "Expecting ':' delimiter (line 3, column 8)",
                     id="partly-expanded-tab"),
        pytest.param('- ```baa\n  echo\n\t  {"a" 1}\n  ```', "Expecting ':' delimiter (line 3, column 9)",
                     id="tab-then-spaces"),
        pytest.param('10. x\r\n    ```baa\r\n    echo\r\n    {"a": }\r\n    ```', "Expecting value (line 4, column 11)",
                     id="crlf"),
    ],
)
def test_errors_point_at_the_line_and_column_in_the_whole_message(text, error):
    block = only(text)
    assert block.error.startswith("params are not valid JSON: ")
    assert block.error.endswith(error)


def test_blocks_nested_deeper_than_markdown_it_reads_are_not_blocks():
    def quoted(depth):
        return "".join(f"{'> ' * depth}{line}\n" for line in ("```baa", "echo", "```"))

    assert found(quoted(MAX_NESTING - 1)) == [(1, "echo", "echo")]
    assert found(quoted(MAX_NESTING)) == []
    assert found(quoted(MAX_NESTING) + "\n```baa\ntime.now\n```") == [(5, "time.now", "time.now")]
    # Past a list nested too deep, nothing more is read: blocks are only ever dropped.
    assert found("- " * (MAX_NESTING // 2) + "x\n\n```baa\necho\n```") == []
    assert found("- " * 5_000 + "```baa\necho\n```") == []


def test_blocks_in_lists_past_the_limit_are_counted():
    text = "\n".join(f"{n}. Step {n}:\n   ```baa\n   echo\n   ```" for n in range(1, MAX_BLOCKS + 6))
    blocks = parse_blocks(text)
    assert [b.line for b in blocks[:2]] == [2, 6]
    assert blocks[-1].error.endswith(f"5 more blocks from line {4 * MAX_BLOCKS + 2} on were ignored")


@st.composite
def contained_block(draw):
    """A ``baa`` block wrapped in one to three containers, closed or not, then a paragraph that ends them all."""
    tool = draw(names)
    body = [tool, *json.dumps(draw(params), indent=draw(st.sampled_from([None, 2]))).split("\n")]
    fence = draw(st.sampled_from("`~")) * draw(st.integers(3, 5))
    is_closed = draw(st.booleans())
    lines = [f"{fence}baa", *body] + ([fence] if is_closed else [])
    for container in draw(st.lists(st.sampled_from(["> ", "- ", "* ", "1. ", "10. ", "3) "]), min_size=1, max_size=3)):
        if container.startswith(">"):
            lines = [container + line for line in lines]
        else:
            lines = [container + lines[0]] + [" " * len(container) + line if line else line for line in lines[1:]]
    return tool, "\n".join(body), is_closed, "\n".join(lines) + "\n\nThe end.\n\n"


@settings(max_examples=300, deadline=None)
@given(st.lists(contained_block(), min_size=1, max_size=4))
def test_finds_closed_blocks_in_containers_and_never_unclosed_ones(segments):
    text, expected, line = "", [], 1
    for tool, body, is_closed, segment in segments:
        if is_closed:
            expected.append((line, tool, body))
        text += segment
        line += segment.count("\n")
    assert found(text) == expected


# --- the CommonMark spec's own examples ---------------------------------------

SPEC = json.loads((Path(__file__).parent / "data" / "commonmark_0.31.2_examples.json").read_text())

# Every fence of the examples above, read from the spec by hand: example ->
# (line of the opening fence, closed by a closing fence line, index of its
# <pre> in the example's HTML). Unclosed ones are closed by CommonMark at the
# end of the text (126, 127, 237's second), of a block quote (128, 237's first)
# or because what looks like a closing line is not one (137: indented four
# spaces, 139: text after the run).
SPEC_FENCES = {
    119: [(1, True, 0)], 120: [(1, True, 0)], 122: [(1, True, 0)], 123: [(1, True, 0)],
    124: [(1, True, 0)], 125: [(1, True, 0)], 126: [(1, False, 0)], 127: [(1, False, 0)],
    128: [(1, False, 0)], 129: [(1, True, 0)], 130: [(1, True, 0)], 131: [(1, True, 0)],
    132: [(1, True, 0)], 133: [(1, True, 0)], 135: [(1, True, 0)], 136: [(1, True, 0)],
    137: [(1, False, 0)], 139: [(1, False, 0)], 140: [(2, True, 0)], 141: [(3, True, 0)],
    142: [(1, True, 0)], 143: [(1, True, 0)], 144: [(1, True, 0)], 146: [(1, True, 0)],
    147: [(1, True, 0)],
    237: [(1, False, 0), (3, False, 1)],
    263: [(3, True, 0)], 278: [(4, True, 0)],
    318: [(2, True, 0)], 321: [(3, True, 0)], 324: [(1, True, 0)],
}
CODE_BLOCK_HTML = re.compile(r'<pre><code(?: class="[^"]*")?>(.*?)</code></pre>', re.DOTALL)
FENCE_RUN = re.compile(r"`{3,}|~{3,}")


def with_baa_info(markdown, opening_lines):
    """``markdown`` with the info string of the fence opening on each of ``opening_lines`` made ``baa``."""
    lines = markdown.split("\n")
    for number in opening_lines:
        run = FENCE_RUN.search(lines[number - 1])
        lines[number - 1] = lines[number - 1][: run.end()] + "baa"
    return "\n".join(lines)


def with_baa_class(spec_html, pre_indexes):
    """The spec's HTML with the code blocks at ``pre_indexes`` shown as fences of info string ``baa``."""
    matches = list(CODE_BLOCK_HTML.finditer(spec_html))
    for index in sorted(pre_indexes, reverse=True):
        match = matches[index]
        spec_html = (
            spec_html[: match.start()] + f'<pre><code class="language-baa">{match[1]}</code></pre>'
            + spec_html[match.end():]
        )
    return spec_html


def commonmark_html(markdown):
    # markdown-it renders an empty block quote on one line where the spec breaks it; same HTML.
    return MarkdownIt("commonmark").render(markdown).replace("<blockquote></blockquote>", "<blockquote>\n</blockquote>")


def test_the_spec_examples_kept_are_the_sections_that_place_fences():
    examples = SPEC["examples"]
    assert SPEC["spec_version"] == "0.31.2"
    assert {e["section"] for e in examples} == {
        "Tabs", "Fenced code blocks", "Indented code blocks", "Block quotes", "List items", "Lists",
    }
    assert len(examples) == 151
    assert sum(len(fences) for fences in SPEC_FENCES.values()) == 32
    assert set(SPEC_FENCES) <= {e["example"] for e in examples}


@pytest.mark.parametrize("example", SPEC["examples"], ids=lambda e: f"example-{e['example']}")
def test_spec_examples_with_baa_info_give_exactly_their_closed_fences(example):
    fences = SPEC_FENCES.get(example["example"], [])
    markdown = with_baa_info(example["markdown"], [line for line, _, _ in fences])
    spec_html = example["html"]

    # The parser reads the example as the spec does, and the fences marked
    # above are the example's fenced code blocks: with their info string made
    # baa, exactly those code blocks of the spec's HTML become baa fences.
    assert commonmark_html(example["markdown"]) == spec_html
    assert commonmark_html(markdown) == with_baa_class(spec_html, [pre for _, _, pre in fences])

    code_blocks = [html.unescape(match[1]) for match in CODE_BLOCK_HTML.finditer(spec_html)]
    expected = [
        (line, code_blocks[pre].removesuffix("\n"))
        for line, is_closed, pre in fences
        if is_closed
    ]
    assert [(b.line, b.raw_text) for b in parse_blocks(markdown)] == expected


def test_block_spans_say_where_each_kept_block_sits():
    text = "intro\r\n\r\n1. step\r\n   ```baa\r\n   echo\r\n   ```\r\n> ```baa\r\n> files.read\r\n> ```\r\n```\r\n```baa\r\nno\r\n```\r\n```"
    lines, spans = blocks_module.block_spans(text)
    assert [(s.index, s.first, s.last) for s in spans] == [(1, 4, 6), (2, 7, 9)]
    assert lines[3:6] == ["   ```baa", "   echo", "   ```"]
    assert [b.index for b in parse_blocks(text)] == [s.index for s in spans]
    many = "\n".join("```baa\necho\n```" for _ in range(MAX_BLOCKS + 2))
    _, spans = blocks_module.block_spans(many)
    assert len(spans) == MAX_BLOCKS and spans[-1].last == 3 * MAX_BLOCKS
