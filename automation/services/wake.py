"""Waking the dispatcher when new work is committed (SPEC §4)."""


def dispatcher_wake() -> None:
    """Tell a running dispatcher loop that due tasks were just committed.

    Called by ingest after its transaction commits. Until the dispatcher's
    wake-up channel exists this does nothing, and new tasks wait for the
    next scheduled tick.
    """
