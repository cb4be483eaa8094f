"""Which sockets without hello are kept, and which one goes for a newcomer (ingest/prehello.py).

Pure: no database, no socket; time is given.
"""

import pytest

from ingest.prehello import PreHelloRoom

pytestmark = pytest.mark.database_free

GRACE = 2.0


def room_with(*arrivals, busy=(), per_address=2, total=4):
    """A room with ``arrivals`` (key, address, second it came) and the ``busy`` keys marked so."""
    room = PreHelloRoom(per_address=per_address, total=total, grace_seconds=GRACE)
    for key, address, at in arrivals:
        assert room.admit(key, address, now=at) is None
    for key in busy:
        room.mark_busy(key)
    return room


OLD_A = [("a1", "A", 0), ("a2", "A", 1)]
FULL = [("b1", "B", 0), ("a1", "A", 1), ("a2", "A", 2), ("c1", "C", 3)]


@pytest.mark.parametrize(
    "arrivals,busy,newcomer,goes",
    [
        # Room left: nobody goes.
        ([("a1", "A", 0)], (), ("b1", "B", 10), None),
        # Its address is at its share: that address's oldest idle socket goes, though the room has space.
        (OLD_A, (), ("a3", "A", 10), "a1"),
        (OLD_A, ("a1",), ("a3", "A", 10), "a2"),  # a socket sending its hello never goes
        # A socket still in its grace never goes: the newcomer waits beyond the share instead.
        (OLD_A, (), ("a3", "A", 2.5), "a1"),
        (OLD_A, (), ("a3", "A", 1.5), None),
        (OLD_A, ("a1", "a2"), ("a3", "A", 10), None),
        # The room is full: the oldest idle socket of the address holding the most goes.
        (FULL, (), ("d1", "D", 10), "a1"),
        (FULL, ("a1", "a2"), ("d1", "D", 10), "b1"),
        (FULL, ("a1", "a2", "b1", "c1"), ("d1", "D", 10), None),
        # An unknown address is one address of its own.
        ([("n1", None, 0), ("n2", None, 0)], (), ("n3", None, 10), "n1"),
    ],
)
def test_a_newcomer_is_never_refused_and_the_right_socket_goes(arrivals, busy, newcomer, goes):
    room = room_with(*arrivals, busy=busy)
    key, address, at = newcomer
    assert room.admit(key, address, now=at) == goes
    assert len(room) == len(arrivals) + 1 - (goes is not None)


def test_a_flood_from_the_plugins_own_address_never_makes_the_plugin_go():
    room = PreHelloRoom(per_address=64, total=256, grace_seconds=GRACE)
    room.admit("other", "B", now=0)
    for n in range(300):  # at once: all in their grace, all kept
        room.admit(f"flood-{n}", "A", now=0)
    assert (room.count("A"), len(room)) == (300, 301)
    # Later, each newcomer makes one flood socket go, the oldest first.
    assert room.admit("plugin", "A", now=5) == "flood-0"
    gone = [room.admit(f"again-{n}", "A", now=5.1) for n in range(400)]  # the flood reopens what was closed
    assert "plugin" not in gone and gone[:2] == ["flood-1", "flood-2"]
    assert room.admit("late", "A", now=7.2) == "plugin"  # idle past its grace: it goes too
    assert room.count("B") == 1  # the other address kept its socket throughout


def test_leaving_twice_or_unknown_is_harmless():
    room = room_with(("a1", "A", 0))
    room.leave("a1")
    room.leave("a1")
    room.leave("never")
    room.mark_busy("never")
    assert (len(room), room.count("A")) == (0, 0)
