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
