"""SQL statements ingest runs per final message: a lone frame, and a batch, in steady state.

On the configured database, one plugin client sends final messages with one ``echo`` block
each, through ``final_messages_ingest`` (what the consumer's batches call), to --conversations
conversations it has written in before (so no conversation, link or policy is new). Counts the
statements of a lone frame, then of a batch of --batch frames, with Django's
``CaptureQueriesContext``, and prints each statement of the lone frame with --show. Then
stores --repeat lone frames one after another in this process (no socket, no server) and
prints how many a second and the median time of one.

    uv run python bench/ingest_statements.py [--batch 32] [--show 1]
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/conductor_bench uv run python bench/ingest_statements.py
"""

import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (  # noqa: E402
    database_engine, echo_block, final_message, fresh_plugin_client, option_parser, setup_django,
)


def main() -> None:
    args = option_parser(__doc__, batch=32, conversations=20, show=0, repeat=300).parse_args()
    setup_django(migrate=True)
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from ingest.frames import parse_final_message
    from ingest.services.messages import ClientMessage, final_messages_ingest

    client, _ = fresh_plugin_client("bench-statements")
    run = uuid.uuid4().hex[:8]
    sent = iter(range(10**9))

    def arrivals(count: int) -> list[ClientMessage]:
        arrivals = []
        for _ in range(count):
            n = next(sent)
            frame = {**final_message(f"{run}-{n}", f"statements-{run}-{n % args.conversations}",
                                     f"Step {n}.\n{echo_block(n)}"), "capture": "network"}
            arrivals.append(ClientMessage(message=parse_final_message(frame), client_pk=client.pk))
        return arrivals

    final_messages_ingest(arrivals=arrivals(args.conversations))  # every conversation and link exists
    final_messages_ingest(arrivals=arrivals(1))  # and the policies are read, where they are kept
    with CaptureQueriesContext(connection) as lone:
        final_messages_ingest(arrivals=arrivals(1))
    with CaptureQueriesContext(connection) as batch:
        final_messages_ingest(arrivals=arrivals(args.batch))

    took = []
    for _ in range(args.repeat):
        lone_frame = arrivals(1)
        started = time.perf_counter()
        final_messages_ingest(arrivals=lone_frame)
        took.append(time.perf_counter() - started)

    print(f"database={database_engine()} conversations={args.conversations}")
    print(f"statements lone_frame={len(lone.captured_queries)} batch={len(batch.captured_queries)} "
          f"batch_frames={args.batch} per_frame_in_batch={len(batch.captured_queries) / args.batch:.2f}")
    print(f"lone_frames_per_s={args.repeat / sum(took):.0f} median_ms={statistics.median(took) * 1000:.2f} "
          f"repeat={args.repeat}")
    if args.show:
        for query in lone.captured_queries:
            print(f"  {query['sql'][:110]}")


if __name__ == "__main__":
    main()
