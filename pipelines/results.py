"""Reads what a message's blocks came to, for the text delivered back to the chat (SPEC §5.3)."""

from __future__ import annotations

import json
from collections.abc import Sequence

from django.conf import settings

from ingest.models import Instruction
from pipelines.rendering import BlockOutcome, render_results


def message_block_outcomes(*, message_id: int, instruction_ids: Sequence[int] | None = None) -> list[BlockOutcome]:
    """The outcome of each block of the message, in block order (only ``instruction_ids`` when given).

    A block's result is the one its most recent task stored; rejected blocks
    never had a task.
    """
    instructions = Instruction.objects.filter(message_id=message_id).order_by("block_index")
    if instruction_ids is not None:
        instructions = instructions.filter(pk__in=instruction_ids)
    instructions = list(instructions.prefetch_related("tasks"))
    outcomes = []
    for instruction in instructions:
        tasks = sorted(instruction.tasks.all(), key=lambda task: task.sequence)
        latest = tasks[-1] if tasks else None
        result_json = latest.result_json if latest else None
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
