"""Functions that tests run in child processes (see tests/procs.py)."""


def replay_file(path: str) -> dict[str, int]:
    from ingest.services.replay import frames_replay

    with open(path, encoding="utf-8") as lines:
        summary = frames_replay(lines)
    return {"new": summary.new, "duplicate": summary.duplicate, "invalid": summary.invalid}
