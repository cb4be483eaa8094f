"""One shape for every registry: task kinds, tools, platform adapters (STYLE rule 4).

Entries are registered once under a key (by default their ``name``): a second
entry under the same key raises the registry's ``duplicate_error``, and a key
never registered raises its ``unknown_error`` with a message that lists what
is known. Subclasses name what they hold and may build their own messages.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    what = "entry"  # how messages name an entry: "task kind", "tool", ...
    duplicate_error: type[Exception] = ValueError
    unknown_error: type[Exception] = LookupError
    # The message for an unknown key; ``{known}`` lists the registered keys.
    unknown_format = "unknown {what} {key!r}; known: {known}"

    def __init__(self) -> None:
        self._entries: dict[Hashable, T] = {}

    def key_of(self, entry: T) -> Hashable:
        return entry.name  # type: ignore[attr-defined]

    def register(self, entry: T) -> T:
        key = self.key_of(entry)
        if not key:
            raise ValueError(f"{type(entry).__name__} has no name")
        if key in self._entries:
            raise self.duplicate_error(f"{self.describe(key)} is already registered")
        self._entries[key] = entry
        return entry

    def unregister(self, key: Hashable) -> None:
        """For tests that register entries of their own."""
        self._entries.pop(key, None)

    def get(self, key: Hashable) -> T:
        try:
            return self._entries[key]
        except KeyError:
            raise self.unknown_error(self.unknown_message(key)) from None

    def describe(self, key: Hashable) -> str:
        return f"{self.what} {key!r}"

    def unknown_message(self, key: Hashable) -> str:
        return self.unknown_format.format(what=self.what, key=key, known=", ".join(self.names()) or "none")

    def names(self) -> list[str]:
        return sorted(str(key) for key in self._entries)

    def __iter__(self) -> Iterator[T]:
        return iter(entry for _, entry in sorted(self._entries.items(), key=lambda item: str(item[0])))

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)
