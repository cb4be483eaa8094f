"""Result rendering time by block count: seconds and delivered length per message.

Renders the outcomes of one message of N blocks (default 1,000, 4,000 and
5,000) within CONDUCTOR_RESULT_MAX_CHARS (default 20,000), in two shapes:
``rejected`` (every block rejected with a one-line error, what a message of
thousands of empty ```baa blocks used to come to) and ``echo`` (every block
succeeded with a small result). Pure code: no database, no Django.

    uv run python bench/rendering.py [--blocks 1000 4000 5000] [--max-chars 20000]
"""

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import option_parser  # noqa: E402
from pipelines.results_text import BlockOutcome, parse_results, render_results  # noqa: E402


def rejected(count: int) -> list[BlockOutcome]:
    return [
        BlockOutcome(n, "", "rejected", error=f"too many blocks: a message may hold at most 32; this is block {n}")
        for n in range(1, count + 1)
    ]


def echo(count: int) -> list[BlockOutcome]:
    return [BlockOutcome(n, "echo", "succeeded", {"n": n, "text": "lorem ipsum " * 8}) for n in range(1, count + 1)]


SHAPES = {"rejected": rejected, "echo": echo}


def main() -> None:
    parser = option_parser(__doc__, max_chars=20000)
    parser.add_argument("--blocks", type=int, nargs="+", default=[1000, 4000, 5000])
    parser.add_argument("--shape", choices=sorted(SHAPES), action="append")
    args = parser.parse_args()

    for shape in args.shape or list(SHAPES):
        for count in args.blocks:
            outcomes = SHAPES[shape](count)
            started = time.perf_counter()
            text = render_results(outcomes, max_chars=args.max_chars)
            seconds = time.perf_counter() - started
            shown = len(parse_results(text))
            print(
                f"shape={shape} blocks={count} max_chars={args.max_chars} "
                f"seconds={seconds:.3f} length={len(text)} result_blocks={shown}",
                flush=True,
            )


if __name__ == "__main__":
    main()
