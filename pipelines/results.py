"""Reads what a message's blocks came to, for the text delivered back to the chat (SPEC §5.3)."""

from __future__ import annotations

import json
from collections.abc import Sequence

from django.conf import settings
from django.db.models import OuterRef, Subquery

from automation.models import AutomationTask
from ingest.models import Instruction
from pipelines.rendering import BlockOutcome, render_results


def message_block_outcomes(*, message_id: int, instruction_ids: Sequence[int] | None = None) -> list[BlockOutcome]:
    """The outcome of each block of the message, in block order (only ``instruction_ids`` when given).

    A block's result is the one its most recent task stored; rejected blocks
    never had a task. One query.
    """
    latest_result = (
        AutomationTask.objects.filter(instruction_id=OuterRef("pk")).order_by("-sequence").values("result_json")[:1]
    )
    instructions = Instruction.objects.filter(message_id=message_id).order_by("block_index")
    if instruction_ids is not None:
        instructions = instructions.filter(pk__in=instruction_ids)
    rows = instructions.only("block_index", "target", "tool", "status", "error").annotate(
        latest_result=Subquery(latest_result)
    )
    outcomes = []
    for instruction in rows:
        result_json = instruction.latest_result
        outcomes.append(BlockOutcome(
            block=instruction.block_index,
            tool=instruction.label,
            status=instruction.status,
            result=json.loads(result_json) if result_json else None,
            error=instruction.error or None,
        ))
    return outcomes


def message_results_text(*, message_id: int, instruction_ids: Sequence[int] | None = None) -> str:
    """The text that reports the message's blocks back to the chat, within CONDUCTOR_RESULT_MAX_CHARS."""
    return results_text(message_block_outcomes(message_id=message_id, instruction_ids=instruction_ids))


def results_text(outcomes: Sequence[BlockOutcome]) -> str:
    """The text that reports these outcomes, within CONDUCTOR_RESULT_MAX_CHARS."""
    return render_results(outcomes, max_chars=settings.CONDUCTOR_RESULT_MAX_CHARS)
