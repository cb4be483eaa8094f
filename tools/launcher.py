"""The process ``shell.run`` starts every command from; see ``tools.shell`` for why.

Run as ``python -I -S launcher.py STATUS_FD [--read PATH]... [--hide PATH]... [--write PATH]...
[--network] [--unconfined] -- ARGV...``, with the minimal environment the command gets and the
command's folder as its own. It uses the standard library only, and its sandbox
(``tools/landlock.py`` and ``tools/isolation.py``, beside it): it runs in a fresh interpreter
without the project, its settings or its site-packages. It

1. becomes a child subreaper, so every process the command starts stays below
   it however it detaches (``setsid``, a double fork): an orphan is
   re-parented to the launcher, not to init;
2. moves into a network namespace of its own (unless ``--network``) and has
   the command started in a PID namespace of its own (``isolation.own_namespaces``);
3. starts the command in a session of its own, with stdin from ``/dev/null``
   and its own stdout and stderr (the server's pipes), after it mounted a
   ``/proc`` and ``/dev/shm`` of its own, and entered the socket filter
   (without network) and the Landlock domain (``landlock.enter_sandbox``): it
   reads only beneath the folders named by ``--read`` and ``--write``, never
   beneath those named by ``--hide`` (the data folder, the secret key), and
   writes only beneath those named by ``--write`` (the workspace, its own
   temp folder);
4. waits until the command exits, or until the server asks it to stop by
   shutting down its end of the status socket (a timeout or a cancel). A
   server that dies closes that socket too, so no command outlives it;
5. kills every process left below it, the command included, and reaps them,
   so nothing holds the output pipes once it exits;
6. writes one JSON line on the status socket and exits: ``{"exit_code": N}``
   (``-N`` when killed by signal N, as ``Popen.returncode``), with
   ``"unconfined": "..."`` saying what of the sandbox this machine refused when
   ``--unconfined`` let the command run without it; or ``{"error": KIND,
   "detail": "..."}`` when the command could not start (``"sandbox"``: the
   kernel refused a part of the sandbox, and ``--unconfined`` was not given).

Run as ``python -I -S launcher.py exec [--read PATH]... [--hide PATH]... [--write PATH]... [--unconfined]
-- ARGV...`` it only enters the same Landlock domain (no namespace: an MCP stdio server keeps the
network it needs, and its process group is the ``mcp`` SDK's to start and end) and replaces itself
with the command; a machine without the sandbox gets the reason on stderr and exit code 126, a
missing command 127.

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
    from tools import isolation, landlock  # imported by the server and its tests
else:
    # Run as ``python -I -S launcher.py``: isolated mode leaves the script's
    # own folder off sys.path. It goes last, after the standard library.
    sys.path.append(os.path.dirname(os.path.abspath(__file__)))
    import isolation
    import landlock

# prctl(2) option, from <linux/prctl.h>.
PR_SET_CHILD_SUBREAPER = 36

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


class Sandbox(NamedTuple):
    """What a command may see and do: the launcher's options."""

    readable: tuple[str, ...] = ()
    hidden: tuple[str, ...] = ()
    writable: tuple[str, ...] = ()
    network: bool = False  # shell.run: a tool policy allowed it the network
    unconfined: bool = False  # run even where the kernel refuses a part of the sandbox, and say which


def enter_confinement(ruleset: landlock.Ruleset | None, told: int | None, *, socket_filter: bool, strict: bool) -> None:
    """In the command's process, between fork and exec: its own ``/proc`` and ``/dev/shm`` when its
    launcher made a PID namespace, then the socket filter and the Landlock domain.

    ``told``: a pipe's end to write b"1" on once the mounts are its own.
    Where they cannot be made, ``strict`` stops the command from starting;
    otherwise it runs seeing the machine's (the launcher reports it).
    """
    if told is not None:
        try:
            isolation.mount_own_proc_and_shm()
        except OSError:
            if strict:
                raise
        else:
            if ruleset is not None:
                # The rules name the mounts that were there; the new ones need their own.
                landlock.grant(ruleset.fd, "/proc", landlock.READ_ACCESS)
                landlock.grant(ruleset.fd, "/dev/shm", landlock.writable_folder_access(landlock.landlock_abi()))
            os.write(told, b"1")
    landlock.drop_privileges()
    if socket_filter:
        isolation.enter_socket_filter()
    if ruleset is not None:
        landlock.restrict_self(ruleset.fd)


def sandbox_gaps(sandbox: Sandbox) -> tuple[landlock.Ruleset | None, list[str]]:
    """The command's Landlock ruleset (None where the kernel has none) and what of the sandbox the kernel refuses.

    Raises OSError when a ruleset cannot be made where Landlock works.
    """
    gaps = []
    ruleset = None
    if (problem := landlock.sandbox_problem()) is not None:
        gaps.append(problem)
    else:
        ruleset = landlock.create_ruleset(
            landlock.landlock_abi(), readable=sandbox.readable, hidden=sandbox.hidden, writable=sandbox.writable
        )
    return ruleset, gaps


def run(command: list[str], status: socket.socket, sandbox: Sandbox = Sandbox()) -> dict[str, object]:
    """Start ``command`` in ``sandbox``, wait, end every process below us; returns the report for the server."""
    try:
        ruleset, gaps = sandbox_gaps(sandbox)
    except OSError as exc:
        return {"error": "sandbox", "detail": str(exc)}
    if gaps and not sandbox.unconfined:
        return {"error": "sandbox", "detail": gaps[0]}
    landlock.checked(landlock.libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), "child subreaper")
    namespace_problem = isolation.own_namespaces(network=sandbox.network)
    filter_problem = None if sandbox.network else isolation.socket_filter_problem()
    for problem in (namespace_problem, filter_problem):
        if problem is not None:
            if not sandbox.unconfined:
                if ruleset is not None:
                    os.close(ruleset.fd)
                return {"error": "sandbox", "detail": problem}
            gaps.append(problem)
    socket_filter = not sandbox.network and filter_problem is None
    told, tell = os.pipe() if namespace_problem is None else (None, None)
    child, own_mounts = None, False
    try:
        try:
            child = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                close_fds=True,
                preexec_fn=lambda: enter_confinement(
                    ruleset, tell, socket_filter=socket_filter, strict=not sandbox.unconfined
                ),
            )
        except FileNotFoundError:
            return {"error": "not_found"}
        except PermissionError:
            return {"error": "not_executable"}
        except OSError as exc:
            return {"error": "start", "detail": exc.strerror or str(exc)}
        except subprocess.SubprocessError:
            return {"error": "sandbox", "detail": "the kernel refused the command a /proc, a /dev/shm, "
                                                  "its socket filter or its Landlock domain"}
        finally:
            if ruleset is not None:
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
            own_mounts = os.read(told, 1) == b"1"  # the child wrote it before exec, or never will
            os.close(told)
    if child is None:
        return {"error": "start", "detail": "the launcher was stopped before the command started"}
    child.returncode = os.waitstatus_to_exitcode(statuses[child.pid])
    if namespace_problem is None and not own_mounts:
        gaps.append("no /proc of its own: the kernel refused to mount one")
    report: dict[str, object] = {"exit_code": child.returncode}
    if gaps:
        report["unconfined"] = "; ".join(gaps)
    return report


def exec_in_sandbox(command: list[str], sandbox: Sandbox = Sandbox()) -> int:
    """Enter the Landlock domain and become ``command``; returns (an exit code) only when that fails."""
    try:
        ruleset, gaps = sandbox_gaps(sandbox)
    except OSError as exc:
        gaps, ruleset = [str(exc)], None
    if gaps and not sandbox.unconfined:
        print(f"the sandbox is not available: {gaps[0]}", file=sys.stderr)
        return 126
    try:
        landlock.enter_sandbox(None if ruleset is None else ruleset.fd)
    finally:
        if ruleset is not None:
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
    sandbox: Sandbox
    command: list[str]


# The launcher's options: those naming a path (each may repeat), and the flags.
PATH_OPTIONS = {"--read": "readable", "--hide": "hidden", "--write": "writable"}
FLAGS = {"--network": "network", "--unconfined": "unconfined"}


def parse_arguments(argv: list[str]) -> Arguments:
    """``STATUS_FD [OPTION]... -- ARGV...`` or the same with ``exec`` for ``STATUS_FD``."""
    usage = (f"usage: {argv[0]} STATUS_FD|exec [--read PATH]... [--hide PATH]... [--write PATH]... "
             f"[--network] [--unconfined] -- ARGV...")
    if len(argv) < 2:
        raise SystemExit(usage)
    first, rest = argv[1], argv[2:]
    options: dict[str, object] = {field: [] for field in PATH_OPTIONS.values()}
    while rest[:1] and rest[0] != "--":
        if rest[0] in FLAGS:
            options[FLAGS[rest[0]]] = True
            rest = rest[1:]
        elif rest[0] in PATH_OPTIONS and len(rest) >= 2 and rest[1] != "--":
            options[PATH_OPTIONS[rest[0]]].append(rest[1])
            rest = rest[2:]
        else:
            raise SystemExit(usage)
    if rest[:1] != ["--"] or len(rest) < 2:
        raise SystemExit(usage)
    sandbox = Sandbox(**{name: tuple(value) if isinstance(value, list) else value for name, value in options.items()})
    return Arguments(None if first == "exec" else int(first), sandbox, rest[1:])


def main(argv: list[str]) -> int:
    status_fd, sandbox, command = parse_arguments(argv)
    if status_fd is None:
        return exec_in_sandbox(command, sandbox)
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, _stop)
    with socket.socket(fileno=status_fd) as status:
        report = run(command, status, sandbox)
        with contextlib.suppress(OSError):  # the server is gone: nobody to tell
            status.sendall(json.dumps(report).encode() + b"\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
