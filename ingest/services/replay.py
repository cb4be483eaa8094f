"""Replaying recorded plugin frames (JSON Lines) through the ingest path."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from conversations.models import Message
from ingest.frames import decode_frame, parse_final_message
from ingest.models import PluginClient
from ingest.protocol import FrameError
from ingest.services.messages import message_ingest
from ingest.sites import platform_names_in_force

logger = logging.getLogger(__name__)


@dataclass
class ReplaySummary:
    new: int = 0
    duplicate: int = 0
    invalid: int = 0
    skipped: int = 0
    problems: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        return (
            f"new: {self.new}, duplicate: {self.duplicate}, "
            f"invalid: {self.invalid}, skipped: {self.skipped}"
        )


@dataclass
class _Replay:
    client: PluginClient | None
    client_fixed: bool
    force: bool
    summary: ReplaySummary

    def hello(self, frame: dict[str, Any], line: int) -> None:
        """A recorded hello names the client the following messages came through."""
        if self.client_fixed:
            return
        client_id = frame.get("client_id")
        self.client = PluginClient.objects.filter(client_id=client_id).first()
        if self.client is None:
            self.summary.problems.append(
                f"line {line}: unknown client {client_id!r}; its messages are stored without a route"
            )

    def final_message(self, frame: dict[str, Any], line: int) -> None:
        result = message_ingest(
            message=parse_final_message(frame, known=platform_names_in_force()), client=self.client,
            source=Message.Source.REPLAY, force=self.force,
        )
        if result.duplicate:
            self.summary.duplicate += 1
        else:
            self.summary.new += 1


HANDLERS: dict[str, Callable[[_Replay, dict[str, Any], int], None]] = {
    "hello": _Replay.hello,
    "browser.final_message": _Replay.final_message,
}


def frames_replay(
    lines: Iterable[str],
    *,
    client: PluginClient | None = None,
    force: bool = False,
    on_line: Callable[[str], None] | None = None,
) -> ReplaySummary:
    """Feed recorded frames through ``message_ingest``, one transaction per message.

    ``client`` fixes the plugin client; without it, each recorded ``hello``
    names the client of the messages after it. A broken line is counted as
    invalid, described in ``problems`` with its line number, and the rest is
    still processed. Frames other than hello and final messages are skipped.
    """
    summary = ReplaySummary()
    replay = _Replay(client=client, client_fixed=client is not None, force=force, summary=summary)
    for number, line in enumerate(lines, start=1):
        if on_line:
            on_line(line)
        if not line.strip():
            continue
        try:
            # The same checks as the socket's: a replayed file is no more trusted.
            frame = decode_frame(line.rstrip("\r\n"))
        except FrameError as exc:
            summary.invalid += 1
            summary.problems.append(f"line {number}: {exc.detail}")
            continue
        handler = HANDLERS.get(frame.get("type"))
        if handler is None:
            summary.skipped += 1
            continue
        try:
            handler(replay, frame, number)
        except FrameError as exc:
            summary.invalid += 1
            summary.problems.append(f"line {number}: {exc.detail}")
    return summary
