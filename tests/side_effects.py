"""A table outside the app's models where test executors record what they did.

Counting rows proves each task ran exactly once; start and end times show
whether two runs for one target overlapped.
"""

from django.db import connection

TABLE = "test_side_effects"


def create_table() -> None:
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TABLE IF EXISTS {TABLE}")
        cursor.execute(
            f"CREATE TABLE {TABLE} (task_id VARCHAR(64), owner VARCHAR(128), target VARCHAR(64), "
            "started_ms BIGINT, ended_ms BIGINT)"
        )


def drop_table() -> None:
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TABLE IF EXISTS {TABLE}")


def record(task, owner: str, started_ms: int, ended_ms: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {TABLE} (task_id, owner, target, started_ms, ended_ms) VALUES (%s, %s, %s, %s, %s)",
            [task.task_id, owner, task.target_client_id, started_ms, ended_ms],
        )


def rows() -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT task_id, owner, target, started_ms, ended_ms FROM {TABLE}")
        return list(cursor.fetchall())
