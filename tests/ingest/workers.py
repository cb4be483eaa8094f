"""Functions that tests run in child processes (see tests/procs.py)."""


def replay_file(path: str) -> dict[str, int]:
    from ingest.services.replay import frames_replay

    with open(path, encoding="utf-8") as lines:
        summary = frames_replay(lines)
    return {"new": summary.new, "duplicate": summary.duplicate, "invalid": summary.invalid}


def tool_policy_set(tool: str, policy: str | None) -> None:
    """Set the global policy of ``tool`` as the admin does (a model save or delete); None deletes it."""
    from ingest.models import ToolPolicy

    if policy is None:
        for row in ToolPolicy.objects.filter(tool=tool, client=None, conversation=None):
            row.delete()
    else:
        ToolPolicy.objects.update_or_create(tool=tool, client=None, conversation=None, defaults={"policy": policy})


def answers_waited(request_ids: list[str], ready: str, timeout: float) -> list[tuple[dict | None, int, int]]:
    """Wait for each request's answer in a thread of its own, as executors do, with no safety poll within
    ``timeout``; touch ``ready`` once all wait. Returns, per request: the answer (None when none came), when
    the wait returned (``time.monotonic_ns``) and how many statements its thread ran."""
    import threading
    import time
    from pathlib import Path

    from django.db import connection

    from ingest.answer_wakes import answer_waiters
    from ingest.services import deliveries

    deliveries.ANSWER_SAFETY_POLL_SECONDS = timeout * 2
    results: dict[str, tuple[dict | None, int, int]] = {}

    def wait(request_id: str) -> None:
        statements = []
        with connection.execute_wrapper(lambda execute, sql, *args: statements.append(sql) or execute(sql, *args)):
            answer = deliveries.delivery_answer_wait(
                request_id=request_id, timeout=timeout, cancelled=threading.Event()
            )
        results[request_id] = (answer, time.monotonic_ns(), len(statements))
        connection.close()

    threads = [threading.Thread(target=wait, args=(request_id,)) for request_id in request_ids]
    for thread in threads:
        thread.start()
    while not all(request_id in answer_waiters._events for request_id in request_ids):
        time.sleep(0.01)
    Path(ready).touch()
    for thread in threads:
        thread.join()
    return [results[request_id] for request_id in request_ids]


def final_messages_ingest_as(client_pk: int, conversation_id: str, message_ids: list[str]) -> list[int]:
    """Ingest a final message per id into ``conversation_id`` through client ``client_pk``; the stored ids."""
    from ingest.frames import parse_final_message
    from ingest.models import PluginClient
    from ingest.services.messages import message_ingest

    client = PluginClient.objects.get(pk=client_pk)
    stored = []
    for message_id in message_ids:
        message = parse_final_message({
            "type": "browser.final_message", "platform": "claude", "conversation_id": conversation_id,
            "message_id": message_id, "text": f"{message_id} says hi",
        })
        stored.append(message_ingest(message=message, client=client).message_id)
    return stored


def platform_seen_at_each_step(folder: str, steps: list[str]) -> list[tuple[bool, str | None]]:
    """At each step (once the file ``folder/step`` exists), whether this process accepts a final message of
    the site "poe", as the socket's handler checks it, and the label its adapter has then (None when unknown).
    Touches ``folder/step.<pid>`` after each. The process reads before the first step, so what it keeps from
    its own earlier reads is in play, as in a server that has been running."""
    import asyncio
    import os
    import time
    from pathlib import Path

    from ingest.frames import parse_final_message
    from ingest.protocol import FrameError
    from ingest.sites import platform_adapter, platforms_known_for, sites_in_force, sites_version
    from platforms.registry import UnsupportedPlatform

    frame = {"type": "browser.final_message", "platform": "poe", "conversation_id": "abcdef123", "text": "hi"}

    async def accepted() -> bool:
        try:
            parse_final_message(frame, known=await platforms_known_for(frame))
        except FrameError:
            return False
        return True

    def label() -> str | None:
        try:
            return platform_adapter("poe").label
        except UnsupportedPlatform:
            return None

    sites_version(), sites_in_force()  # a running server has read the sites
    seen = []
    for step in steps:
        deadline = time.monotonic() + 60
        while not Path(folder, step).exists():
            if time.monotonic() > deadline:
                raise TimeoutError(step)
            time.sleep(0.02)
        seen.append((asyncio.run(accepted()), label()))
        Path(folder, f"{step}.{os.getpid()}").touch()
    return seen
