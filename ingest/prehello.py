"""Which sockets that have not said ``hello`` a server process keeps, and which one goes for a newcomer.

A socket without hello costs memory (its application instance, up to a
64 KiB first frame) and proves nothing, so a process keeps at most
``per_address`` of them from one remote address and ``total`` in all, so
that one peer cannot take the whole room. Refusing newcomers once the room
is full let anyone who could open sockets keep every plugin out (forty
idle sockets, reopened as the hello timeout closed them, did), and so would
any hard cap: a peer that reopens its sockets as fast as they close takes
every place that frees up, and a plugin on the same machine shares its
address. So a newcomer is never refused. When its address is at its share,
or the room is full, an idle socket goes instead: the oldest of the
newcomer's address, or else of the address holding the most. Idle means it
sent no frame and has had ``grace_seconds`` to do so: a real plugin sends
its hello as soon as its socket opens, so a socket is never made to go
while its hello may be on the way or being checked. When no socket may go
yet, the newcomer waits beyond the share for now; what the room then holds
is bounded by the sockets a server can accept in ``grace_seconds``, and the
next newcomers bring it back within bounds.

Pure bookkeeping, one instance per process, used from the event loop only;
time is the caller's (``now``, in seconds of a monotonic clock).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field


@dataclass
class _Waiting:
    address: str | None
    since: float
    is_busy: bool = False  # it sent a frame (its hello is being checked)


@dataclass
class PreHelloRoom:
    per_address: int
    total: int
    grace_seconds: float
    # Insertion order is arrival order: the first entry is the oldest.
    _waiting: dict[Hashable, _Waiting] = field(default_factory=dict)
    _per_address: Counter = field(default_factory=Counter)

    def __len__(self) -> int:
        return len(self._waiting)

    def count(self, address: str | None) -> int:
        return self._per_address[address]

    def admit(self, key: Hashable, address: str | None, *, now: float) -> Hashable | None:
        """Let ``key`` (from ``address``, None when unknown) wait; return the socket that goes for it, if one must.

        That socket has already left the room; its owner closes it.
        """
        evicted = None
        if self._per_address[address] >= self.per_address:
            evicted = self._oldest_idle(lambda entry: entry.address == address, now=now)
        elif len(self._waiting) >= self.total:
            evicted = self._oldest_idle_of_the_fullest_address(now=now)
        if evicted is not None:
            self.leave(evicted)
        self._waiting[key] = _Waiting(address=address, since=now)
        self._per_address[address] += 1
        return evicted

    def mark_busy(self, key: Hashable) -> None:
        """``key`` sent its first frame: it is being checked and must not be made to go."""
        if key in self._waiting:
            self._waiting[key].is_busy = True

    def leave(self, key: Hashable) -> None:
        """``key`` said hello, closed or was made to go; a key not waiting is ignored."""
        entry = self._waiting.pop(key, None)
        if entry is not None:
            self._per_address[entry.address] -= 1
            if not self._per_address[entry.address]:
                del self._per_address[entry.address]

    def _may_go(self, entry: _Waiting, now: float) -> bool:
        return not entry.is_busy and now - entry.since >= self.grace_seconds

    def _oldest_idle(self, matches: Callable[[_Waiting], bool], *, now: float) -> Hashable | None:
        return next((key for key, entry in self._waiting.items() if self._may_go(entry, now) and matches(entry)), None)

    def _oldest_idle_of_the_fullest_address(self, *, now: float) -> Hashable | None:
        """The oldest socket that may go of the address holding the most; of two such addresses, the older socket."""
        chosen, most = None, 0
        for key, entry in self._waiting.items():
            if self._may_go(entry, now) and self._per_address[entry.address] > most:
                chosen, most = key, self._per_address[entry.address]
        return chosen
