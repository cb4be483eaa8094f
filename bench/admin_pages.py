"""Admin pages on large data: every changelist and the overview, timed.

Fills the configured database once with --messages assistant messages of
--message-kib KiB (the raw frame holds the text again, as ingest stores it)
in --conversations conversations, and --instructions instructions: 80 % of
them in the newest message, as a runaway chat makes them, the rest two to a
message; every instruction that was not rejected has its task and events.
The fill is one transaction, so a run finds the data complete or absent; a
later run finds it and skips the fill. Then GETs every registered model's
changelist, the overview, and the pages of the runaway message and of its
conversation, as a superuser through django.test.Client, and prints the
seconds per page (the best of --repeat).

    uv run python bench/admin_pages.py [--repeat 3]
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/conductor_h3_bench uv run python bench/admin_pages.py
"""

import datetime as dt
import json
import random
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import database_engine, option_parser, setup_django  # noqa: E402

PREFIX = "bench-admin"
MESSAGE_BATCH = 100
INSTRUCTION_BATCH = 5000
RUNAWAY_SHARE = 0.8
# Instruction outcomes, in proportion: mostly succeeded, a few of every other kind.
OUTCOMES = {"succeeded": 85, "failed": 5, "rejected": 5, "awaiting_approval": 2, "cancelled": 3}
TASK_STATUS = {"succeeded": "succeeded", "failed": "failed", "awaiting_approval": "blocked", "cancelled": "cancelled"}
DAY_MS = 24 * 3_600_000


def chat_text(rng: random.Random, size: int) -> str:
    """Prose-like text of ``size`` characters: words of a fixed vocabulary, so it
    compresses about as well as chat text (PostgreSQL compresses large values)."""
    vocabulary = ["".join(rng.choices("etaoinshrdlucmfwypvbgk", k=rng.randint(2, 9))) for _ in range(3000)]
    return " ".join(rng.choices(vocabulary, k=size // 5))[:size]


def bench_messages():
    from conversations.models import Message

    return Message.objects.filter(conversation__remote_id__startswith=f"{PREFIX}-")


def is_filled(*, messages: int, instructions: int) -> bool:
    from ingest.models import Instruction

    return (
        bench_messages().count() == messages
        and Instruction.objects.filter(message__in=bench_messages()).count() == instructions
    )


def instruction_placements(message_pks: list[int], instructions: int):
    """(message pk, block index) of every instruction: the runaway share in the first message,
    the rest two at a time to each other message in turn."""
    runaway = int(instructions * RUNAWAY_SHARE)
    for index in range(1, runaway + 1):
        yield message_pks[0], index
    others = message_pks[1:]
    blocks: dict[int, int] = {}
    for n in range(instructions - runaway):
        pk = others[(n // 2) % len(others)]
        blocks[pk] = blocks.get(pk, 0) + 1
        yield pk, blocks[pk]


def fill(*, conversations: int, messages: int, message_kib: int, instructions: int) -> None:
    from django.db import transaction
    from django.utils import timezone

    from automation.models import AutomationTask, TaskEvent
    from conversations.models import Conversation, ConversationLink, Message
    from ingest.models import Instruction, PluginClient
    from platforms import platforms

    rng = random.Random(1)
    size = message_kib * 1024
    pool = chat_text(rng, 4 * size)
    now = timezone.now()
    now_ms = int(now.timestamp() * 1000)
    outcomes = [status for status, share in OUTCOMES.items() for _ in range(share)]

    with transaction.atomic():
        # Leftovers of an earlier fill with other sizes.
        Instruction.objects.filter(message__in=bench_messages()).delete()
        Conversation.objects.filter(remote_id__startswith=f"{PREFIX}-").delete()
        client, _ = PluginClient.objects.get_or_create(client_id=PREFIX, defaults={"name": PREFIX, "token_hash": "-"})
        chats = Conversation.objects.bulk_create(
            Conversation(platform=platforms.names()[n % len(platforms)], remote_id=f"{PREFIX}-{n}",
                         title=f"Bench conversation {n}", last_activity_at=now - dt.timedelta(minutes=n))
            for n in range(conversations)
        )
        ConversationLink.objects.bulk_create(
            ConversationLink(conversation=chat, client=client, last_seen_at=now,
                             page_url=f"https://claude.ai/chat/{chat.remote_id}")
            for chat in chats
        )

        conversation_of: dict[int, int] = {}  # message pk -> conversation pk
        for start in range(0, messages, MESSAGE_BATCH):
            batch = []
            for n in range(start, min(start + MESSAGE_BATCH, messages)):
                chat = chats[n % conversations]
                offset = rng.randrange(len(pool) - size)
                text = f"Message {n}.\n{pool[offset:offset + size]}"
                remote_id = f"{PREFIX}-m{n}"
                batch.append(Message(
                    conversation=chat, role=Message.Role.ASSISTANT, source=Message.Source.PLUGIN,
                    remote_message_id=remote_id, dedupe_key=f"id:{remote_id}", text=text, client=client,
                    raw_frame={"type": "browser.final_message", "id": remote_id, "platform": chat.platform,
                               "conversation_id": chat.remote_id, "message_id": remote_id, "text": text},
                    received_at=now - dt.timedelta(minutes=n),  # message 0, the runaway one, is the newest
                ))
            conversation_of.update((m.pk, m.conversation_id) for m in Message.objects.bulk_create(batch, batch_size=50))
            print(f"\rmessages {len(conversation_of)}/{messages}", end="", file=sys.stderr, flush=True)
        print(file=sys.stderr)

        placements = instruction_placements(list(conversation_of), instructions)
        for start in range(0, instructions, INSTRUCTION_BATCH):
            batch = []
            for n in range(start, min(start + INSTRUCTION_BATCH, instructions)):
                message_pk, block_index = next(placements)
                outcome = outcomes[n % len(outcomes)]
                batch.append(Instruction(
                    message_id=message_pk, block_index=block_index, raw_text=f'echo\n{{"n": {n}}}',
                    target="conductor", tool="echo", params={"n": n}, status=outcome,
                    error="unknown tool 'ecoh'" if outcome == "rejected" else "",
                ))
            tasks, events = [], []
            for instruction in Instruction.objects.bulk_create(batch, batch_size=1000):
                status = TASK_STATUS.get(instruction.status)
                if status is None:
                    continue  # rejected: never queued
                created = now_ms - rng.randrange(30 * DAY_MS)
                finished = created + 2000 if status != "blocked" else None
                task = AutomationTask(
                    task_id=uuid.UUID(int=rng.getrandbits(128)).hex, kind="instruction.execute", status=status,
                    payload_json=json.dumps({"instruction_id": instruction.pk}),
                    result_json=json.dumps({"tool": "echo", "result": instruction.params})
                    if status == "succeeded" else None,
                    last_error="echo: boom" if status == "failed" else None,
                    execute_after=created, attempt_count=0 if status == "blocked" else 1, max_attempts=3,
                    lane="instructions", sequence=created * 1_000_000 + instruction.pk % 1_000_000,
                    created_at=created, updated_at=finished or created,
                    started_at=created + 1000 if finished else None, finished_at=finished,
                    conversation_id=conversation_of[instruction.message_id], message_id=instruction.message_id,
                    instruction_id=instruction.pk,
                )
                tasks.append(task)
                events.append(TaskEvent(task=task, action="create", status_to="blocked" if not finished else "pending",
                                        actor="ingest", at=created))
                if finished:
                    events.append(TaskEvent(task=task, action="finish", status_from="running", status_to=status,
                                            actor="bench", at=finished))
            AutomationTask.objects.bulk_create(tasks, batch_size=1000)
            TaskEvent.objects.bulk_create(events, batch_size=1000)
            print(f"\rinstructions {start + len(batch)}/{instructions}", end="", file=sys.stderr, flush=True)
        print(file=sys.stderr)


def admin_urls() -> list[str]:
    from django.contrib import admin
    from django.urls import reverse

    changelists = [
        reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist")
        for model in admin.site._registry
    ]
    runaway = bench_messages().order_by("-received_at").values_list("pk", "conversation_id").first()
    return [
        *sorted(changelists),
        reverse("admin-overview"),
        reverse("admin:conversations_message_change", args=[runaway[0]]),
        reverse("admin:conversations_conversation_change", args=[runaway[1]]),
    ]


def time_pages(urls: list[str], repeat: int) -> list[tuple[str, int, float]]:
    from django.contrib.auth.models import User
    from django.test import Client

    user = User.objects.filter(username=PREFIX).first() or User.objects.create_superuser(PREFIX, password=None)
    browser = Client(SERVER_NAME="127.0.0.1")  # a host ALLOWED_HOSTS accepts, without the test environment
    browser.force_login(user)
    browser.get("/admin/")  # loads the templates and the session once, outside the timings
    timings = []
    for url in urls:
        best = None
        for _ in range(repeat):
            started = time.perf_counter()
            response = browser.get(url)
            seconds = time.perf_counter() - started
            best = seconds if best is None else min(best, seconds)
        timings.append((url, response.status_code, best))
        print(f"{best:9.3f} s  {response.status_code}  {url}", flush=True)
    return timings


def main() -> None:
    parser = option_parser(__doc__, conversations=200, messages=10_000, message_kib=100, instructions=100_000)
    parser.add_argument("--repeat", type=int, default=3, help="GETs per page; the best one counts")
    parser.add_argument("--fill-only", action="store_true")
    args = parser.parse_args()

    setup_django(migrate=True)
    engine = database_engine()
    if is_filled(messages=args.messages, instructions=args.instructions):
        print(f"database={engine}: already filled, skipping the fill")
    else:
        started = time.perf_counter()
        fill(conversations=args.conversations, messages=args.messages, message_kib=args.message_kib,
             instructions=args.instructions)
        print(f"database={engine}: filled in {time.perf_counter() - started:.1f} s")
    if args.fill_only:
        return
    if engine == "postgresql":
        # Statistics, as autovacuum keeps them in a running database; without
        # them the planner guesses row counts far off (and JIT-compiles plans).
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")

    print(f"database={engine} messages={args.messages} x {args.message_kib} KiB "
          f"instructions={args.instructions} repeat={args.repeat} (best of)")
    timings = time_pages(admin_urls(), args.repeat)
    slowest = max(timings, key=lambda row: row[2])
    print(f"slowest: {slowest[2]:.3f} s {slowest[0]}")


if __name__ == "__main__":
    main()
