"""Plugin versions: ``manifest.json``'s dotted numbers (up to four, as Chrome allows)."""

from __future__ import annotations


def version_key(version: str) -> tuple[int, ...] | None:
    """``"1.2.0"`` as ``(1, 2, 0, 0)``; None for anything else."""
    parts = version.strip().split(".")
    if not 1 <= len(parts) <= 4 or not all(part.isdigit() for part in parts):
        return None
    return tuple(int(part) for part in parts) + (0,) * (4 - len(parts))


def plugin_is_outdated(version: str, minimum: str) -> bool:
    """Whether a plugin of ``version`` is older than ``minimum`` (empty: none is).

    A plugin that sent no version, or one that is not dotted numbers, is
    older than any minimum: it cannot show that it is new enough.
    """
    if not minimum:
        return False
    least = version_key(minimum)
    have = version_key(version)
    return least is not None and (have is None or have < least)
