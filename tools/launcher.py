"""The process ``shell.run`` starts every command from; see ``tools.shell`` for why.

Run as ``python -I -S launcher.py STATUS_FD [--hide PATH]... [--write PATH]... -- ARGV...``, with the minimal
environment the command gets and the command's folder as its own. It uses the
standard library only: it runs in a fresh interpreter without the project,
its settings or its site-packages. It

1. becomes a child subreaper, so every process the command starts stays below
   it however it detaches (``setsid``, a double fork): an orphan is
   re-parented to the launcher, not to init;
2. starts the command in the sandbox of ``enter_sandbox``, in a session of
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
import ctypes
import errno
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from stat import S_ISDIR
from typing import NamedTuple

# prctl(2) options and capability numbers, from <linux/prctl.h> and <linux/capability.h>.
PR_CAPBSET_DROP = 24
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
CAP_SYS_PTRACE = 19
CAP_SYS_ADMIN = 21
CAP_PERFMON = 38

# Landlock's system calls have the same numbers on every architecture but alpha.
SYS_LANDLOCK_CREATE_RULESET = 444
SYS_LANDLOCK_ADD_RULE = 445
SYS_LANDLOCK_RESTRICT_SELF = 446
LANDLOCK_CREATE_RULESET_VERSION = 1 << 0
LANDLOCK_RULE_PATH_BENEATH = 1
LANDLOCK_ACCESS_FS_WRITE_FILE = 1 << 1
LANDLOCK_ACCESS_FS_READ_FILE = 1 << 2
LANDLOCK_ACCESS_FS_REMOVE_DIR = 1 << 4
LANDLOCK_ACCESS_FS_REMOVE_FILE = 1 << 5
LANDLOCK_ACCESS_FS_MAKE_CHAR = 1 << 6
LANDLOCK_ACCESS_FS_MAKE_DIR = 1 << 7
LANDLOCK_ACCESS_FS_MAKE_REG = 1 << 8
LANDLOCK_ACCESS_FS_MAKE_SOCK = 1 << 9
LANDLOCK_ACCESS_FS_MAKE_FIFO = 1 << 10
LANDLOCK_ACCESS_FS_MAKE_BLOCK = 1 << 11
LANDLOCK_ACCESS_FS_MAKE_SYM = 1 << 12
LANDLOCK_ACCESS_FS_REFER = 1 << 13  # ABI 2 (Linux 5.19)
LANDLOCK_ACCESS_FS_TRUNCATE = 1 << 14  # ABI 3 (Linux 6.2)
LANDLOCK_SCOPE_SIGNAL = 1 << 1  # ABI 6 (Linux 6.12)

# Every right that changes the file system: the sandbox handles them all and
# grants them only beneath the folders a command may write in.
WRITE_ACCESS = (
    LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_REMOVE_DIR | LANDLOCK_ACCESS_FS_REMOVE_FILE
    | LANDLOCK_ACCESS_FS_MAKE_CHAR | LANDLOCK_ACCESS_FS_MAKE_DIR | LANDLOCK_ACCESS_FS_MAKE_REG
    | LANDLOCK_ACCESS_FS_MAKE_SOCK | LANDLOCK_ACCESS_FS_MAKE_FIFO | LANDLOCK_ACCESS_FS_MAKE_BLOCK
    | LANDLOCK_ACCESS_FS_MAKE_SYM
)
# Device nodes are made nowhere, not even in the workspace: a root command
# could otherwise make one for the machine's memory or disks.
DEVICE_MAKING = LANDLOCK_ACCESS_FS_MAKE_CHAR | LANDLOCK_ACCESS_FS_MAKE_BLOCK
# Character devices any program may write to (``echo x > /dev/null``, a
# prompt on the terminal, a pseudo-terminal a program opens): writing to
# them changes no file.
WRITABLE_DEVICES = (
    "/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty", "/dev/ptmx", "/dev/pts",
)

# unshare(2) flags, from <linux/sched.h>; mount(2) flags, from <linux/mount.h>.
CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID = 0x00020000, 0x10000000, 0x20000000
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REC, MS_PRIVATE = 2, 4, 8, 1 << 14, 1 << 18

# Each of these lets a process read other processes' environment and memory
# past the checks that stop a plain process (on Linux 6.18, even from inside a
# Landlock domain). Normally only root holds them.
MEMORY_READING_CAPABILITIES = (CAP_SYS_PTRACE, CAP_SYS_ADMIN, CAP_PERFMON)
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


def _landlock_version() -> tuple[int, int]:
    """``landlock_create_ruleset``'s answer to "which ABI?": (the version or -1, errno)."""
    version = _libc.syscall(SYS_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0), LANDLOCK_CREATE_RULESET_VERSION)
    return version, (ctypes.get_errno() if version < 0 else 0)


def landlock_abi() -> int:
    """The kernel's Landlock ABI version; 0 when Landlock is missing or disabled, or this is not Linux."""
    if sys.platform != "linux":
        return 0  # syscall numbers mean other things elsewhere
    return max(_landlock_version()[0], 0)


def landlock_refusal(version: int, code: int) -> str | None:
    """Why the kernel's answer ``(version, errno)`` to the ABI question leaves no sandbox; None when it is one.

    Asking the kernel is the test: ``/sys/kernel/security/lsm`` may be absent
    (securityfs not mounted, a container) where Landlock works.
    """
    if version >= 1:
        return None
    if code == errno.EOPNOTSUPP:
        return "Landlock is built into this kernel but not enabled (add landlock to the kernel's lsm= boot parameter)"
    if code == errno.ENOSYS:
        return ("this kernel has no Landlock (it needs Linux 5.13 or newer), "
                "or a seccomp filter (a container's) hides its system calls")
    if code == errno.EPERM:
        return "a seccomp filter (a container's) refuses Landlock's system calls"
    return f"landlock_create_ruleset failed: {os.strerror(code) if code else f'answered {version}'}"


def sandbox_problem() -> str | None:
    """Why this machine cannot give commands the sandbox, or None: the test ``run`` makes before each command."""
    if sys.platform != "linux":
        return f"the sandbox needs Linux (prctl, pidfd and Landlock); this is {sys.platform}"
    return landlock_refusal(*_landlock_version())


class _PathBeneathAttr(ctypes.Structure):
    # struct landlock_path_beneath_attr, which the kernel declares packed.
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def write_access(abi: int) -> int:
    """The write rights a kernel of Landlock ABI ``abi`` knows: ``WRITE_ACCESS``, ``REFER`` and ``TRUNCATE`` once it has them.

    ``REFER`` (moving or linking a file into another folder) is refused in
    any Landlock domain unless granted; ABI 1 cannot grant it at all.
    """
    return (
        WRITE_ACCESS
        | (LANDLOCK_ACCESS_FS_REFER if abi >= 2 else 0)
        | (LANDLOCK_ACCESS_FS_TRUNCATE if abi >= 3 else 0)
    )


class Ruleset(NamedTuple):
    fd: int
    handled: int  # the file system rights it handles


def create_ruleset(abi: int, *, hidden: list[str] = (), writable: list[str] = ()) -> Ruleset:
    """A Landlock ruleset letting the command write only beneath ``writable`` and read nothing beneath ``hidden``.

    Returns it (its fd is close-on-exec). It handles every write right
    (``write_access``) and grants them beneath each ``writable`` folder (the
    workspace, the command's own temp folder) and on the devices programs
    write to (``writable_rules``): the command creates, changes, renames and
    removes nothing anywhere else, the data folder around the workspace
    included, and makes no device node anywhere.

    The domain it creates matters too: a process in a Landlock domain may not
    read or trace any process outside it. From ABI 6 it also scopes signals:
    the command cannot kill this launcher to escape the clean-up, nor signal
    the server.

    When a ``hidden`` path exists, it also handles reading files, and grants
    it everywhere but around the hidden paths (``hidden_paths_rules``).
    """
    reading = hidden_paths_rules(hidden)
    writing = writable_rules(abi, writable, hidden)
    handled = write_access(abi) | (LANDLOCK_ACCESS_FS_READ_FILE if reading else 0)
    attr = (ctypes.c_uint64 * 3)(handled, 0, LANDLOCK_SCOPE_SIGNAL if abi >= 6 else 0)
    # The kernel reads only as much of the struct as its ABI knows.
    size = ctypes.sizeof(attr) if abi >= 6 else ctypes.sizeof(ctypes.c_uint64)
    ruleset = _checked(
        _libc.syscall(SYS_LANDLOCK_CREATE_RULESET, attr, ctypes.c_size_t(size), 0), "landlock_create_ruleset"
    )
    try:
        for path, _is_folder in reading:
            _grant(ruleset, path, LANDLOCK_ACCESS_FS_READ_FILE)
        for path, access in writing:
            _grant(ruleset, path, access)
    except BaseException:
        os.close(ruleset)
        raise
    return Ruleset(ruleset, handled)


def writable_rules(abi: int, writable: list[str], hidden: list[str] = ()) -> list[tuple[str, int]]:
    """What to grant (each path, and its rights) so that a command writes only beneath ``writable`` and on the devices.

    A writable folder gets every write right but making device nodes. One
    that holds a hidden file (a workspace set to the data folder itself) is
    granted around it, as reading is (``hidden_paths_rules``): the folders
    around in full, the files around their contents. The folders on the way
    to the hidden file get nothing, so nothing directly in them can be made,
    removed or renamed, and the hidden file stays where the next command's
    rules look for it.
    """
    rights = write_access(abi) & ~DEVICE_MAKING
    contents = LANDLOCK_ACCESS_FS_WRITE_FILE | (LANDLOCK_ACCESS_FS_TRUNCATE if abi >= 3 else 0)
    grants = [(device, LANDLOCK_ACCESS_FS_WRITE_FILE) for device in WRITABLE_DEVICES]
    for folder in writable:
        real = os.path.realpath(folder)
        if not any(_is_beneath(os.path.realpath(path), real) for path in hidden):
            grants.append((real, rights))
            continue
        grants += [
            (path, rights if is_folder else contents) for path, is_folder in hidden_paths_rules(hidden, beneath=real)
        ]
    return grants


def _is_beneath(path: str, folder: str) -> bool:
    return path != folder and os.path.commonpath([path, folder]) == folder


def hidden_paths_rules(hidden: list[str], *, beneath: str = "/") -> list[tuple[str, bool]]:
    """What to grant (each path, and whether it is a folder) so that only the files beneath ``hidden`` are out of reach.

    Landlock only grants, beneath a path; it cannot take a file out of a
    grant. So the grants go around each hidden path: every entry of each of
    its parent folders, from ``beneath`` (``/`` for reading) down, except
    the entries on the way to a hidden path. Nothing directly in a folder on
    the way (the data folder's own files) can be removed or renamed, since
    removing is granted only in the writable folders (``writable_rules``, which
    goes around a hidden file the same way), so a hidden file stays where
    the next command's rules look for it. Moving or linking a file into
    another folder (``REFER``) never gives it more rights than it had where
    it was, and another name of a hidden file (a hard link beside it) is not
    granted, since a grant holds for the file, not the name.

    What is granted is what exists now: an entry made later right in a
    folder on the way cannot be read by this command. Symlinks are not
    granted: reading through one is checked at its target. Hidden paths that
    do not exist, or lie outside ``beneath``, hide nothing; with none,
    nothing is granted and the caller handles nothing more.
    """
    top = os.path.realpath(beneath)
    on_the_way: set[str] = set()
    hidden_real: set[str] = set()
    hidden_inodes: set[tuple[int, int]] = set()
    for path in hidden:
        real = os.path.realpath(path)
        if not _is_beneath(real, top):
            continue
        try:
            info = os.lstat(real)
        except OSError:
            continue
        hidden_real.add(real)
        hidden_inodes.add((info.st_dev, info.st_ino))
        while True:
            on_the_way.add(real)
            if real == top:
                break
            real = os.path.dirname(real)
    grants = []
    for folder in sorted(on_the_way - hidden_real):
        try:
            entries = sorted(os.scandir(folder), key=lambda entry: entry.name)
        except OSError:
            continue  # not a folder, or one the server cannot list: nothing below it to grant
        for entry in entries:
            if entry.path in on_the_way or entry.is_symlink():
                continue
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue  # gone meanwhile
            if (info.st_dev, info.st_ino) not in hidden_inodes:
                grants.append((entry.path, S_ISDIR(info.st_mode)))
    return grants


def _grant(ruleset: int, path: str, access: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return  # gone meanwhile, or out of reach: nothing to grant
    try:
        attr = _PathBeneathAttr(access, fd)
        _checked(
            _libc.syscall(SYS_LANDLOCK_ADD_RULE, ruleset, LANDLOCK_RULE_PATH_BENEATH, ctypes.byref(attr), 0),
            f"landlock_add_rule {path}",
        )
    finally:
        os.close(fd)


def enter_sandbox(ruleset_fd: int) -> None:
    """Called in the command's process between fork and exec (the launcher has one thread, so this is safe).

    Drops the capabilities that read other processes' memory (they exist
    only when the server runs as root, and the drop needs root), clears
    ambient capabilities, sets no_new_privs (so no setuid program gives them
    back) and enters the Landlock domain, which every descendant inherits
    and none can leave.
    """
    _checked(_libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "clear ambient capabilities")
    for capability in MEMORY_READING_CAPABILITIES:
        # EPERM: not root (no CAP_SETPCAP), and under no_new_privs a
        # non-root exec gains no capability anyway; EINVAL: a kernel that
        # predates the capability.
        if _libc.prctl(PR_CAPBSET_DROP, capability, 0, 0, 0) < 0 and ctypes.get_errno() not in (
            errno.EPERM, errno.EINVAL,
        ):
            _checked(-1, f"drop capability {capability}")
    _checked(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    _checked(_libc.syscall(SYS_LANDLOCK_RESTRICT_SELF, ruleset_fd, 0), "landlock_restrict_self")


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
            _checked(_libc.unshare(CLONE_NEWPID), "unshare")
            return None
        uid, gid = os.geteuid(), os.getegid()
        _checked(_libc.unshare(CLONE_NEWUSER | CLONE_NEWPID), "unshare")
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
    _checked(_libc.unshare(CLONE_NEWNS), "unshare")
    _checked(_libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "make the mounts private")
    _checked(_libc.mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None), "mount /proc")


def enter_sandbox_with_own_proc(ruleset: Ruleset, told: int | None) -> None:
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
            if ruleset.handled & LANDLOCK_ACCESS_FS_READ_FILE:
                # The rules granting reading (around hidden files) name the
                # /proc that was there; the new one needs its own.
                _grant(ruleset.fd, "/proc", LANDLOCK_ACCESS_FS_READ_FILE)
            os.write(told, b"1")
    enter_sandbox(ruleset.fd)


def run(
    command: list[str], status: socket.socket, *, hidden: list[str] = (), writable: list[str] = ()
) -> dict[str, object]:
    """Start ``command``, wait, end every process below us; returns the report for the server."""
    if (problem := sandbox_problem()) is not None:
        return {"error": "sandbox", "detail": problem}
    try:
        ruleset = create_ruleset(landlock_abi(), hidden=hidden, writable=writable)
    except OSError as exc:
        return {"error": "sandbox", "detail": str(exc)}
    _checked(_libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), "child subreaper")
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
    if (problem := sandbox_problem()) is not None:
        print(f"the sandbox is not available: {problem}", file=sys.stderr)
        return 126
    try:
        ruleset = create_ruleset(landlock_abi(), hidden=hidden, writable=writable)
    except OSError as exc:
        print(f"the sandbox is not available: {exc}", file=sys.stderr)
        return 126
    try:
        enter_sandbox(ruleset.fd)
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
