"""Block parsing speed: ``ingest.blocks.parse_blocks`` on assistant-shaped messages.

Two messages, parsed --repeat times each (the best run is kept):

- ``lists``: a 20 KiB assistant message whose 10 ```baa blocks all sit in
  list items, as assistants write numbered steps: numbered and bulleted items,
  wide markers (``10.``), a nested list, a block quote inside an item, with
  prose, a Python fence and a shell fence around them.
- ``many``: 80,000 empty ``~~~baa`` blocks, just under 1 MiB: the largest
  message the plugin's frame allows, all but 32 of its blocks past the limit.

Prints, per message, its size, the blocks found (``found``; at most 33 for
``many``: 32 blocks and the one rejection counting the rest), the seconds per
parse, messages per second and blocks per second (the blocks the message
holds, found or not, over the seconds). Pure code: no database, no Django.

    uv run python bench/block_parsing.py [--repeat 20] [--shape lists]
"""

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import option_parser  # noqa: E402
from ingest.blocks import parse_blocks  # noqa: E402

PROSE = (
    "This step matters because the build reads the notes before it writes anything, "
    "so a stale file there shows up as a confusing error much later. "
)

STEPS = [
    # (list marker and indentation of the item's content, the block's tool and params)
    ("1. ", 'files.read\n{"path": "notes/todo.md"}'),
    ("2. ", 'files.list\n{"path": "src", "glob": "*.py"}'),
    ("3. ", 'shell.run\n{"argv": ["pytest", "-q", "tests/ingest"], "timeout_s": 120}'),
    ("4. ", "time.now"),
    ("5. ", 'files.write\n{"path": "notes/done.md", "content": "step 5\\n", "mode": "append"}'),
    ("6. ", 'echo\n{"step": 6}'),
    ("7. ", "tasks.status"),
    ("8. ", 'laptop::files.read\n{"path": "README.md", "max_bytes": 4096}'),
    ("9. ", 'echo\n{"step": 9, "nested": true}'),
    ("10. ", 'shell.run\n{"argv": ["git", "status", "--short"]}'),
]


def indent(text: str, width: int) -> str:
    return "\n".join((" " * width + line) if line else line for line in text.split("\n"))


def lists_message(size: int = 20 * 1024) -> tuple[str, int]:
    """An assistant message of about ``size`` bytes with 10 ```baa blocks, all in list items."""
    parts = ["Here is the plan, one step at a time.\n"]
    for n, (marker, body) in enumerate(STEPS, start=1):
        width = len(marker)
        fence = f"```baa\n{body}\n```"
        if n == 4:  # a bullet nested in the item
            item = f"{marker}Check the clock:\n{' ' * width}- first this:\n{indent(fence, width + 2)}"
        elif n == 7:  # a block quote in the item
            quoted = "\n".join("> " + line for line in fence.split("\n"))
            item = f"{marker}As the runbook says:\n{indent(quoted, width)}"
        elif n == 9:  # a bulleted item holding the fence directly
            item = f"- {fence.replace(chr(10), chr(10) + '  ')}"
        else:
            item = f"{marker}Step {n}:\n{indent(fence, width)}"
        parts.append(item + "\n")
        parts.append(indent(PROSE * 2, len(marker)) + "\n")
        if n == 3:
            parts.append("```python\nfor path in paths:\n    print(path)\n```\n")
        if n == 6:
            parts.append("   ```sh\n   make test\n   ```\n")
    text = "\n".join(parts)
    filler = []
    while len((text + "\n".join(filler)).encode()) < size:
        filler.append(PROSE)
    return text + "\n" + " ".join(filler), len(STEPS)


def many_message(count: int = 80_000) -> tuple[str, int]:
    return "~~~baa\n~~~\n" * count, count


SHAPES = {"lists": lists_message, "many": many_message}


def main() -> None:
    parser = option_parser(__doc__, repeat=20)
    parser.add_argument("--shape", choices=sorted(SHAPES), action="append")
    args = parser.parse_args()

    for shape in args.shape or list(SHAPES):
        text, held = SHAPES[shape]()
        best = float("inf")
        for _ in range(args.repeat):
            started = time.perf_counter()
            found = len(parse_blocks(text))
            best = min(best, time.perf_counter() - started)
        print(
            f"shape={shape} bytes={len(text.encode())} blocks={held} found={found} "
            f"seconds={best:.5f} messages_per_second={1 / best:.1f} blocks_per_second={held / best:.0f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
