"""Django's PostgreSQL backend, with no health check for a connection that was used a moment ago.

With ``CONN_HEALTH_CHECKS`` Django checks a kept connection with a
``SELECT 1`` the first time it is used after each ``close_old_connections``:
the consumer's every database call, each dispatcher thread's tasks, each
status push round. Under load that is six round trips a message to ask a
connection that answered milliseconds before. As connection pools do
(HikariCP's ``aliveBypassWindowMs``), a connection that opened a cursor
within the last ``HEALTH_CHECK_BYPASS_SECONDS`` is taken as alive; one idle
for longer is checked as before. One that died within that window fails its
next statement instead, which Django's own check after an error catches
(``errors_occurred``: an unusable connection is closed at the next
``close_old_connections``), and which every caller already handles as a lost
connection.

Its features also say that a ``WITH`` clause may write
(``supports_data_modifying_with``): a transition writes its row and its
event in one statement; and that an ``UPDATE … FROM`` returns the rows of
its other tables (``returns_from_tables_of_update``).
"""

from __future__ import annotations

import time

from django.db.backends.postgresql import base, features

HEALTH_CHECK_BYPASS_SECONDS = 0.5


class DatabaseFeatures(features.DatabaseFeatures):
    # A WITH clause may hold an INSERT or UPDATE whose rows the statement reads
    # (a transition and its event in one statement: automation/services/transitions.py).
    supports_data_modifying_with = True
    # An UPDATE's RETURNING may name a table of its FROM, which holds the row as it was before
    # (an instruction's status change and the status it had: ingest/services/instructions.py).
    returns_from_tables_of_update = True


class DatabaseWrapper(base.DatabaseWrapper):
    features_class = DatabaseFeatures
    _used_at = float("-inf")

    def _cursor(self, name=None):
        cursor = super()._cursor(name)
        self._used_at = time.monotonic()
        return cursor

    def close_if_health_check_failed(self) -> None:
        if (
            self.connection is not None and not self.health_check_done
            and time.monotonic() - self._used_at < HEALTH_CHECK_BYPASS_SECONDS
        ):
            self.health_check_done = True
            return
        super().close_if_health_check_failed()
