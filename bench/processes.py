"""What a process costs while a benchmark runs: its CPU seconds, its memory, its children, over a block of time.

Linux only (``/proc``).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from tests.server import rss_bytes  # shared with the tests that watch a server's memory

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _stat_fields(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name (the first is the state), or None
    once the process is gone or a zombie."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] == "Z" else fields


def started_at(pid: int) -> int | None:
    fields = _stat_fields(pid)
    return int(fields[19]) if fields else None


def cpu_seconds(pid: int) -> float | None:
    """CPU-seconds (user and system) the process has used so far; None once it is gone."""
    fields = _stat_fields(pid)
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS if fields else None


def processes_cpu_seconds(pids: Sequence[int]) -> float:
    """CPU-seconds the processes ``pids`` have used so far, together; ended ones count 0."""
    return sum(cpu_seconds(pid) or 0.0 for pid in pids)


def rss_mib(pid: int) -> float:
    return rss_bytes(pid) / 1024 / 1024


def process_tree(pid: int) -> list[int]:
    """``pid`` and every process below it."""
    from tests.server import descendants

    return [pid, *descendants(pid)]


def asgi_pid(server: subprocess.Popen) -> int:
    """The daphne process below ``manage.py serve``."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
                    parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                except (OSError, ValueError, IndexError):
                    continue
                if parent == server.pid and b"daphne" in cmdline:
                    return int(entry.name)
        time.sleep(0.2)
    raise SystemExit("no daphne process found")


class ProcessMeter:
    """CPU-seconds and peak resident memory of the processes ``pids()`` names, over the ``with``
    block, read from /proc every ``every`` seconds in a thread of its own (and at both ends).

    A process that appears during the block counts from its start; one that ends counts until
    its last reading, so at most ``every`` seconds of its CPU are missed. The memory is the
    largest sum of their resident sizes at one reading (pages they share count once each)."""

    def __init__(self, pids: Callable[[], Iterable[int]], *, every: float = 1.0):
        self._pids = pids
        self._every = every
        self._first: dict[int, float] = {}
        self._last: dict[int, float] = {}
        self._stop = threading.Event()
        self.rss_peak_bytes = 0
        self.seconds = 0.0

    def __enter__(self) -> "ProcessMeter":
        self._started = time.monotonic()
        self._read(at_start=True)
        self._thread = threading.Thread(target=self._sample, name="process-meter", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        self._thread.join()
        self._read()
        self.seconds = time.monotonic() - self._started

    def _sample(self) -> None:
        while not self._stop.wait(self._every):
            self._read()

    def _read(self, *, at_start: bool = False) -> None:
        rss = 0
        for pid in self._pids():
            used = cpu_seconds(pid)
            if used is None:
                continue
            self._first.setdefault(pid, used if at_start else 0.0)
            self._last[pid] = used
            rss += rss_bytes(pid)
        self.rss_peak_bytes = max(self.rss_peak_bytes, rss)

    @property
    def processes(self) -> int:
        return len(self._last)

    @property
    def cpu_seconds_by_pid(self) -> dict[int, float]:
        """CPU-seconds each process used over the block."""
        return {pid: self._last[pid] - self._first[pid] for pid in self._last}

    @property
    def cpu_seconds(self) -> float:
        return sum(self.cpu_seconds_by_pid.values())

    @property
    def cpu_percent(self) -> float:
        """CPU as a percentage of one core over the block."""
        return 100 * self.cpu_seconds / self.seconds if self.seconds else 0.0
