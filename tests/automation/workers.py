"""Functions that tests run in child processes (see tests/procs.py)."""

import random
import time


def lease_every_task(owner: str, task_ids: list[str], now: int, lease_until: int, seed: int) -> list[str]:
    """Try to lease each task once, in a shuffled order; return the ids this owner got."""
    from automation.services.transitions import InvalidTransition, task_lease

    order = list(task_ids)
    random.Random(seed).shuffle(order)
    won = []
    for task_id in order:
        try:
            task_lease(task_id, lease_owner=owner, lease_until=lease_until, now=now)
        except InvalidTransition:
            continue
        won.append(task_id)
        time.sleep(0)
    return won
