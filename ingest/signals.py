"""Signal receivers of ingest: every change of a ``ToolPolicy`` changes the policies'
version token in the same transaction (``ToolPolicyVersion``)."""

from __future__ import annotations

import uuid

from ingest.models import ToolPolicyVersion

VERSION_PK = 1


def tool_policies_changed(**_: object) -> None:
    """Give the policies a new version token: the next batch of every process reloads them.

    A ``post_save`` / ``post_delete`` receiver of ``ToolPolicy``, so it runs inside the change's
    transaction when there is one (the admin's). The row is made again if it is missing (a
    database flushed by a test).
    """
    token = uuid.uuid4()
    if not ToolPolicyVersion.objects.filter(pk=VERSION_PK).update(token=token):
        ToolPolicyVersion.objects.update_or_create(pk=VERSION_PK, defaults={"token": token})
