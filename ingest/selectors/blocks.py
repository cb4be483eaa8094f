"""Reads of a message's blocks as stored (an ``Instruction`` each): what each came to, how many in each status."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from django.db.models import Count, OuterRef, Subquery

from automation.models import AutomationTask
from ingest.models import Instruction


def instruction_counts_by_status() -> dict[str, int]:
    """How many instructions there are in each status (only those with any). One query."""
    rows = Instruction.objects.values_list("status").annotate(n=Count("pk")).order_by()
    return dict(rows)


class BlockRow(NamedTuple):
    """What a block of a message came to, as its delivery reports it."""

    block: int
    label: str
    status: str
    result_json: str | None  # its latest task's; None without a task (a rejected block)
    error: str


def message_block_rows(*, message_id: int | None, instruction_ids: Sequence[int] | None = None) -> list[BlockRow]:
    """Each block of the message (only ``instruction_ids`` when given), in block order. One query:
    a block's result is the one its most recent task stored, read as a sub-select."""
    latest_result = (
        AutomationTask.objects.filter(instruction_id=OuterRef("pk")).order_by("-sequence").values("result_json")[:1]
    )
    instructions = Instruction.objects.filter(message_id=message_id).order_by("block_index")
    if instruction_ids is not None:
        instructions = instructions.filter(pk__in=instruction_ids)
    rows = instructions.only("block_index", "target", "tool", "status", "error").annotate(
        latest_result=Subquery(latest_result)
    )
    return [
        BlockRow(row.block_index, row.label, row.status, row.latest_result, row.error) for row in rows
    ]
