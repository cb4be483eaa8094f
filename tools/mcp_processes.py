"""A stdio MCP server's process, seen from the server that started it: its stderr's last lines, its pid, its own folders."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
from pathlib import Path

# How much of a server's stderr is kept to explain a failure.
STDERR_TAIL_BYTES = 2048
# Set in each stdio server's environment to find its process (not a secret).
MARKER_VARIABLE = "CONDUCTOR_MCP_SESSION"


class StderrTail:
    """A pipe for a server's stderr, drained by a thread that keeps the last ``STDERR_TAIL_BYTES``."""

    def __init__(self) -> None:
        read_fd, write_fd = os.pipe()
        self.writer = os.fdopen(write_fd, "w")
        self._tail = bytearray()
        self._thread = threading.Thread(target=self._drain, args=(read_fd,), daemon=True, name="mcp-stderr")
        self._thread.start()

    def _drain(self, read_fd: int) -> None:
        with os.fdopen(read_fd, "rb", buffering=0) as pipe:
            while chunk := pipe.read(65536):
                self._tail = (self._tail + chunk)[-STDERR_TAIL_BYTES:]

    def close(self) -> None:
        """Close our end; the tail is complete once the server's end is closed too (it exited)."""
        with contextlib.suppress(OSError):
            self.writer.close()
        # A server that failed at start wrote its reason just before exiting: wait for it, briefly.
        self._thread.join(0.5)

    def text(self) -> str:
        lines = bytes(self._tail).decode("utf-8", errors="replace").strip().splitlines()
        return " | ".join(lines[-5:])[-500:]


def child_with_marker(marker: str) -> int | None:
    """The pid of this process's child whose environment holds ``marker``, or None."""
    me, needle = os.getpid(), f"{MARKER_VARIABLE}={marker}".encode()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as stat:
                parent = int(stat.read().rsplit(b")", 1)[1].split()[1])
            if parent != me:
                continue
            with open(f"/proc/{entry.name}/environ", "rb") as environ:
                if needle in environ.read().split(b"\0"):
                    return int(entry.name)
        except (OSError, ValueError, IndexError):
            continue
    return None


class OwnFolders:
    """A stdio server's own home (its cache in it) and temp folder, outside the workspace.

    The home is ``home`` when given (kept between sessions: the server's
    entry's folder in the data folder, so that ``npx`` fetches a package once
    and a server that keeps a file beside its code remembers it), else one
    made for the session. The temp folder, and a made home, are private
    (0700) in the system's temp folder, made when the session starts and
    removed when it ends. The sandbox lets the server write only in these,
    the workspace and its entry's ``writable`` folders
    (``landlock.writable_rules``), so ``HOME``, ``XDG_CACHE_HOME`` and
    ``TMPDIR`` point here: what a package runner caches (``npx``'s ``~/.npm``,
    ``uvx``'s ``~/.cache/uv``) lands in the home, not in the user's workspace.
    """

    def __init__(self, home: str = "") -> None:
        self.root = Path(tempfile.mkdtemp(prefix="conductor-mcp-"))
        self.temp = self.root / "tmp"
        self.temp.mkdir(mode=0o700)
        if home:
            self.home = Path(home)
            self.home.mkdir(mode=0o700, parents=True, exist_ok=True)
        else:
            self.home = self.root / "home"
            self.home.mkdir(mode=0o700)

    @property
    def writable(self) -> tuple[Path, ...]:
        return tuple(dict.fromkeys((self.home, self.root)))

    def environment(self) -> dict[str, str]:
        return {"HOME": str(self.home), "XDG_CACHE_HOME": str(self.home / ".cache"), "TMPDIR": str(self.temp)}

    def remove(self) -> None:
        """Remove the session's folders (a kept home stays)."""
        shutil.rmtree(self.root, ignore_errors=True)
