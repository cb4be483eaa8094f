"""The soak's verdict from what its plugins saw and what the database holds (``bench/soak.py``).

Pure: no Django, no sockets, so that ``tests/bench/test_soak_tally.py`` can check it. Each
message the soak sends carries one ``echo`` block whose params hold the message's tag; the
result the server delivers back quotes the params, so a delivery names the messages it
answers by their tags.

A delivery frame that comes again with a ``delivery_key`` already seen is the server trying
the same delivery again (its answer was late or lost): the reference plugin answers it with
its earlier result instead of posting the text twice (SPEC §6), so it is counted as resent,
not as a duplicate. A message named under two different keys was delivered twice.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

TAG = re.compile(r"soak-\d+-\d+")


def tag_of(plugin: int, n: int) -> str:
    """The tag of the ``n``-th message of plugin number ``plugin``; also its message id."""
    return f"soak-{plugin}-{n}"


def tags_in(text: str) -> tuple[str, ...]:
    """The tags a delivered text names, each once, in the order they come."""
    return tuple(dict.fromkeys(TAG.findall(text)))


@dataclass(frozen=True)
class Delivery:
    """A delivery frame a plugin received: its ``delivery_key`` (the task id), the tags its text
    names, and when it came (``time.perf_counter``, as the send times)."""

    key: str
    tags: tuple[str, ...]
    received_at: float


@dataclass(frozen=True)
class Tally:
    sent: int  # messages the plugins sent (each once, however often it was resent)
    stored: int  # of those, stored in the database
    deliveries: int  # delivery frames the plugins received
    unstored: tuple[str, ...]  # sent but never stored
    undelivered: tuple[str, ...]  # stored but named by no delivery
    delivered_twice: tuple[str, ...]  # named by deliveries of more than one key (one entry per extra key)
    resent: int  # delivery frames whose key came before
    stray: int  # delivery frames that name no message the plugins sent
    ran_twice: int  # instruction.execute tasks that started running more than once
    latencies_ms: list[float] = field(default_factory=list)  # sent → first delivery naming it

    @property
    def lost(self) -> int:
        return len(self.unstored) + len(self.undelivered)

    @property
    def duplicated(self) -> int:
        return len(self.delivered_twice) + self.ran_twice

    @property
    def failed(self) -> bool:
        """Anything lost, duplicated or delivered that nobody sent: the soak fails."""
        return bool(self.lost or self.duplicated or self.stray)


def tally(sent: Mapping[str, float], stored: Iterable[str], deliveries: Sequence[Delivery], *,
          ran_twice: int) -> Tally:
    """Judge a soak: ``sent`` maps each tag to when it was first sent, ``stored`` the message
    ids in the database, ``deliveries`` every delivery frame received, ``ran_twice`` how many
    instructions the database says ran more than once."""
    stored = set(stored) & sent.keys()
    first_delivered: dict[str, float] = {}
    keys_naming: Counter[str] = Counter()
    keys_seen: set[str] = set()
    stray = resent = 0
    for delivery in sorted(deliveries, key=lambda d: d.received_at):
        if delivery.key in keys_seen:
            resent += 1
            continue
        keys_seen.add(delivery.key)
        known = [tag for tag in delivery.tags if tag in sent]
        if not known:
            stray += 1
        for tag in known:
            keys_naming[tag] += 1
            first_delivered.setdefault(tag, delivery.received_at)
    return Tally(
        sent=len(sent),
        stored=len(stored),
        deliveries=len(deliveries),
        unstored=tuple(sorted(sent.keys() - stored)),
        undelivered=tuple(sorted(stored - first_delivered.keys())),
        delivered_twice=tuple(sorted(tag for tag, keys in keys_naming.items() for _ in range(keys - 1))),
        resent=resent,
        stray=stray,
        ran_twice=ran_twice,
        latencies_ms=[(at - sent[tag]) * 1000 for tag, at in first_delivered.items()],
    )
