"""The process ``shell.run`` starts every command from; see ``tools.shell`` for why.

Run as ``python -I -S launcher.py STATUS_FD [--hide PATH]... [--write PATH]... -- ARGV...``, with the minimal
environment the command gets and the command's folder as its own. It uses the
standard library only, and its sandbox (``tools/landlock.py``, beside it): it
runs in a fresh interpreter without the project, its settings or its
site-packages. It

1. becomes a child subreaper, so every process the command starts stays below
   it however it detaches (``setsid``, a double fork): an orphan is
   re-parented to the launcher, not to init;
2. starts the command in the sandbox of ``landlock.enter_sandbox``, in a session of
   its own, with stdin from ``/dev/null`` and its own stdout and stderr (the
   server's pipes); it may write only beneath the folders named by
   ``--write`` (the workspace, its own temp folder; ``writable_rules``), and
   the files named by ``--hide`` (the server's secret key file) cannot be
   read from inside it (``hidden_paths_rules``);
3. waits until the command exits, or until the server asks it to stop by
   shutting down its end of the status socket (a timeout or a cancel). A
   server that dies closes that socket too, so no command outlives it;
4. kills every process left below it, the command included, and reaps them,
   so nothing holds the output pipes once it exits;
5. writes one JSON line on the status socket and exits: ``{"exit_code": N}``
   (``-N`` when killed by signal N, as ``Popen.returncode``), or
   ``{"error": KIND, "detail": "..."}`` when the command could not start.

Run as ``python -I -S launcher.py exec [--hide PATH]... [--write PATH]... -- ARGV...`` it only enters the same
sandbox and replaces itself with the command (an MCP stdio server, whose
process group the ``mcp`` SDK starts and ends); a machine without the
sandbox gets the reason on stderr and exit code 126, a missing command 127.

Linux only: it needs prctl, pidfd and Landlock (Linux 5.13 or newer).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from typing import NamedTuple

if __package__:
    from tools import landlock  # imported by the server and its tests
else:
    # Run as ``python -I -S launcher.py``: isolated mode leaves the script's
    # own folder off sys.path. It goes last, after the standard library.
    sys.path.append(os.path.dirname(os.path.abspath(__file__)))
    import landlock

# prctl(2) option, from <linux/prctl.h>.
PR_SET_CHILD_SUBREAPER = 36

# unshare(2) flags, from <linux/sched.h>; mount(2) flags, from <linux/mount.h>.
CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID = 0x00020000, 0x10000000, 0x20000000
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REC, MS_PRIVATE = 2, 4, 8, 1 << 14, 1 << 18

# How long the kill loop waits for SIGKILLed children to become reapable.
REAP_POLL_SECONDS = 0.01


class Stop(Exception):
    """The launcher itself was told to stop (SIGTERM, SIGINT, SIGHUP)."""


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


def own_pid_namespace() -> str | None:
    """Start this launcher's children in a PID namespace of their own; None when it could, else why not.

    The command becomes the first process of the namespace (its pid 1):
    when it exits, the kernel kills every process left in it. As root the
    launcher may make one; another user needs a user namespace around it
    (mapping the user to itself), which the kernel may refuse (unprivileged
    user namespaces disabled, a container's seccomp filter, an AppArmor
    restriction).
    """
    try:
        if os.geteuid() == 0:
            landlock.checked(landlock.libc.unshare(CLONE_NEWPID), "unshare")
            return None
        uid, gid = os.geteuid(), os.getegid()
        landlock.checked(landlock.libc.unshare(CLONE_NEWUSER | CLONE_NEWPID), "unshare")
        for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
            with open(f"/proc/self/{name}", "w") as file:
                file.write(text)
    except OSError as exc:
        return f"no PID namespace: {exc}"
    return None


def mount_own_proc() -> None:
    """In the namespace's first process: a mount namespace of its own, with ``/proc`` showing only the namespace.

    The mounts are made private first, so that the new ``/proc`` stays in
    this namespace. Raises OSError when the kernel refuses (a ``/proc``
    partly hidden by a container's mounts, say).
    """
    landlock.checked(landlock.libc.unshare(CLONE_NEWNS), "unshare")
    landlock.checked(landlock.libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "make the mounts private")
    landlock.checked(
        landlock.libc.mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None), "mount /proc"
    )


def enter_sandbox_with_own_proc(ruleset: landlock.Ruleset, told: int | None) -> None:
    """``enter_sandbox``, after mounting a ``/proc`` of the command's own when its launcher made a PID namespace.

    ``told``: a pipe's end to write b"1" on once the ``/proc`` is its own.
    Where it cannot be mounted, the command still runs, seeing every
    process of the machine in ``/proc`` as before (the launcher reports it).
    """
    if told is not None:
        try:
            mount_own_proc()
        except OSError:
            pass
        else:
            if ruleset.handled & landlock.LANDLOCK_ACCESS_FS_READ_FILE:
                # The rules granting reading (around hidden files) name the
                # /proc that was there; the new one needs its own.
                landlock.grant(ruleset.fd, "/proc", landlock.LANDLOCK_ACCESS_FS_READ_FILE)
            os.write(told, b"1")
    landlock.enter_sandbox(ruleset.fd)


def run(
    command: list[str], status: socket.socket, *, hidden: list[str] = (), writable: list[str] = ()
) -> dict[str, object]:
    """Start ``command``, wait, end every process below us; returns the report for the server."""
    if (problem := landlock.sandbox_problem()) is not None:
        return {"error": "sandbox", "detail": problem}
    try:
        ruleset = landlock.create_ruleset(landlock.landlock_abi(), hidden=hidden, writable=writable)
    except OSError as exc:
        return {"error": "sandbox", "detail": str(exc)}
    landlock.checked(landlock.libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), "child subreaper")
    namespace_problem = own_pid_namespace()
    told, tell = os.pipe() if namespace_problem is None else (None, None)
    child, own_proc = None, False
    try:
        try:
            child = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                close_fds=True,
                preexec_fn=lambda: enter_sandbox_with_own_proc(ruleset, tell),
            )
        except FileNotFoundError:
            return {"error": "not_found"}
        except PermissionError:
            return {"error": "not_executable"}
        except OSError as exc:
            return {"error": "start", "detail": exc.strerror or str(exc)}
        except subprocess.SubprocessError:
            return {"error": "sandbox", "detail": "the command could not enter the sandbox"}
        finally:
            os.close(ruleset.fd)
            if tell is not None:
                os.close(tell)
        wait_for_exit_or_stop(child.pid, status)
    except Stop:
        pass
    finally:
        # A second signal must not cut the clean-up short.
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, signal.SIG_IGN)
        statuses = end_descendants()
        if told is not None:
            own_proc = os.read(told, 1) == b"1"  # the child wrote it before exec, or never will
            os.close(told)
    if child is None:
        return {"error": "start", "detail": "the launcher was stopped before the command started"}
    child.returncode = os.waitstatus_to_exitcode(statuses[child.pid])
    if namespace_problem is None and not own_proc:
        namespace_problem = "no /proc of its own: the kernel refused to mount one"
    report: dict[str, object] = {"exit_code": child.returncode}
    if namespace_problem is not None:
        report["processes_visible"] = namespace_problem
    return report


def exec_in_sandbox(command: list[str], *, hidden: list[str] = (), writable: list[str] = ()) -> int:
    """Enter the sandbox and become ``command``; returns (an exit code) only when that fails."""
    if (problem := landlock.sandbox_problem()) is not None:
        print(f"the sandbox is not available: {problem}", file=sys.stderr)
        return 126
    try:
        ruleset = landlock.create_ruleset(landlock.landlock_abi(), hidden=hidden, writable=writable)
    except OSError as exc:
        print(f"the sandbox is not available: {exc}", file=sys.stderr)
        return 126
    try:
        landlock.enter_sandbox(ruleset.fd)
    finally:
        os.close(ruleset.fd)
    try:
        os.execvp(command[0], command)
    except FileNotFoundError:
        print(f"{command[0]}: command not found", file=sys.stderr)
        return 127
    except OSError as exc:
        print(f"{command[0]}: {exc.strerror or exc}", file=sys.stderr)
        return 126


class Arguments(NamedTuple):
    status_fd: int | None  # None for ``exec``
    hidden: list[str]
    writable: list[str]
    command: list[str]


def parse_arguments(argv: list[str]) -> Arguments:
    """``STATUS_FD [--hide PATH]... [--write PATH]... -- ARGV...`` or the same with ``exec`` for ``STATUS_FD``."""
    usage = f"usage: {argv[0]} STATUS_FD|exec [--hide PATH]... [--write PATH]... -- ARGV..."
    if len(argv) < 2:
        raise SystemExit(usage)
    first, rest = argv[1], argv[2:]
    paths: dict[str, list[str]] = {"--hide": [], "--write": []}
    while rest[:1] and rest[0] in paths and len(rest) >= 2 and rest[1] != "--":
        paths[rest[0]].append(rest[1])
        rest = rest[2:]
    if rest[:1] != ["--"] or len(rest) < 2:
        raise SystemExit(usage)
    return Arguments(None if first == "exec" else int(first), paths["--hide"], paths["--write"], rest[1:])


def main(argv: list[str]) -> int:
    status_fd, hidden, writable, command = parse_arguments(argv)
    if status_fd is None:
        return exec_in_sandbox(command, hidden=hidden, writable=writable)
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, _stop)
    with socket.socket(fileno=status_fd) as status:
        report = run(command, status, hidden=hidden, writable=writable)
        with contextlib.suppress(OSError):  # the server is gone: nobody to tell
            status.sendall(json.dumps(report).encode() + b"\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
