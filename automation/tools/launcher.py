"""The process ``shell.run`` starts every command from; see ``automation.tools.shell`` for why.

Run as ``python -I -S launcher.py STATUS_FD -- ARGV...``, with the minimal
environment the command gets and the command's folder as its own. It uses the
standard library only: it runs in a fresh interpreter without the project,
its settings or its site-packages. It

1. becomes a child subreaper, so every process the command starts stays below
   it however it detaches (``setsid``, a double fork): an orphan is
   re-parented to the launcher, not to init;
2. starts the command in a session of its own, with stdin from
   ``/dev/null`` and its own stdout and stderr (the server's pipes);
3. waits until the command exits, or until the server asks it to stop by
   shutting down its end of the status socket (a timeout or a cancel). A
   server that dies closes that socket too, so no command outlives it;
4. kills every process left below it, the command included, and reaps them,
   so nothing holds the output pipes once it exits;
5. writes one JSON line on the status socket and exits: ``{"exit_code": N}``
   (``-N`` when killed by signal N, as ``Popen.returncode``), or
   ``{"error": KIND, "detail": "..."}`` when the command could not start.

Linux only: it needs prctl and pidfd (Linux 5.3 or newer).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time

PR_SET_CHILD_SUBREAPER = 36  # from <linux/prctl.h>
# How long the kill loop waits for SIGKILLed children to become reapable.
REAP_POLL_SECONDS = 0.01

_libc = ctypes.CDLL(None, use_errno=True)


class Stop(Exception):
    """The launcher itself was told to stop (SIGTERM, SIGINT, SIGHUP)."""


def _checked(result: int, what: str) -> int:
    if result < 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}")
    return result


def parent_pid(stat: str) -> int:
    """The parent pid in the text of ``/proc/<pid>/stat``; the command name in it may hold spaces and ``)``."""
    return int(stat[stat.rindex(")") + 1 :].split()[1])


def child_pids(parent: int) -> list[int]:
    """Pids whose parent is ``parent`` right now."""
    children = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                if parent_pid(stat.read()) == parent:
                    children.append(int(entry))
        except (OSError, ValueError):
            pass  # gone meanwhile
    return children


def end_descendants() -> dict[int, int]:
    """SIGKILL every process below the launcher and reap it; returns each reaped child's wait status.

    Killing a child re-parents its own children here (we are a subreaper), so
    killing children until none is left ends the whole tree. Only an empty
    ``waitpid`` (ECHILD) proves that: a child re-parented after a scan is
    found by the next one.
    """
    statuses: dict[int, int] = {}
    me = os.getpid()
    while True:
        for pid in child_pids(me):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        reaped = False
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return statuses
            if not pid:
                break
            statuses[pid], reaped = status, True
        if not reaped:
            time.sleep(REAP_POLL_SECONDS)


def wait_for_exit_or_stop(pid: int, status: socket.socket) -> None:
    """Block until process ``pid`` exits or the server writes to or closes the status socket."""
    pidfd = os.pidfd_open(pid)
    try:
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        poller.register(status, select.POLLIN)
        poller.poll()
    finally:
        os.close(pidfd)


def _stop(signum: int, frame: object) -> None:
    raise Stop(signal.Signals(signum).name)


def run(command: list[str], status: socket.socket) -> dict[str, object]:
    """Start ``command``, wait, end every process below us; returns the report for the server."""
    _checked(_libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), "child subreaper")
    child = None
    try:
        try:
            child = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                close_fds=True,
            )
        except FileNotFoundError:
            return {"error": "not_found"}
        except PermissionError:
            return {"error": "not_executable"}
        except OSError as exc:
            return {"error": "start", "detail": exc.strerror or str(exc)}
        wait_for_exit_or_stop(child.pid, status)
    except Stop:
        pass
    finally:
        # A second signal must not cut the clean-up short.
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, signal.SIG_IGN)
        statuses = end_descendants()
    if child is None:
        return {"error": "start", "detail": "the launcher was stopped before the command started"}
    child.returncode = os.waitstatus_to_exitcode(statuses[child.pid])
    return {"exit_code": child.returncode}


def main(argv: list[str]) -> int:
    status_fd, separator, *command = argv[1:]
    if separator != "--" or not command:
        raise SystemExit(f"usage: {argv[0]} STATUS_FD -- ARGV...")
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, _stop)
    with socket.socket(fileno=int(status_fd)) as status:
        report = run(command, status)
        with contextlib.suppress(OSError):  # the server is gone: nobody to tell
            status.sendall(json.dumps(report).encode() + b"\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
