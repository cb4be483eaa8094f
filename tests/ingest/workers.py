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
