"""Delivery requests and their answers (SPEC §6, ``browser.proxy_delivery``)."""

from __future__ import annotations

from automation.clock import now_ms
from automation.models import DeliveryRequest
from ingest.frames import DeliveryResult


def delivery_result_record(*, client_pk: int, result: DeliveryResult, now: int | None = None) -> bool:
    """Store the plugin's answer to a delivery request it was sent.

    Returns False, storing nothing, when no unanswered request with that id
    was sent to this client: the plugin gets ``invalid``.
    """
    return bool(
        DeliveryRequest.objects.filter(
            request_id=result.request_id, client_id=client_pk, answered_at__isnull=True
        ).update(
            answered_at=now_ms() if now is None else now,
            result={"ok": result.ok, "status": result.status, "body": result.body, "error": result.error},
        )
    )
