"""Landlock, the sandbox every ``shell.run`` command and stdio MCP server runs in: which ABI the
kernel has, the rules of a command's ruleset, and entering it (see ``tools/launcher.py``).

What a command may see is a list, not a list of what is hidden: it reads
(and runs) only beneath the folders named readable (the system's: ``/usr``,
``/etc``, ...; ``readable_rules``) and the ones it may write in, and writes
only beneath the folders named writable (``writable_rules``). A readable
folder that holds a hidden path (the data folder under ``/opt``, the secret
key) is granted around it (``hidden_paths_rules``). So a new file in the
data folder is out of reach without anyone naming it. Standard library only,
as the launcher: it is imported by the launcher in a fresh interpreter
without the project's packages, and by the server for its checks
(``sandbox_problem``).
"""

from __future__ import annotations

import ctypes
import errno
import os
import sys
from stat import S_ISDIR
from typing import NamedTuple

# prctl(2) options and capability numbers, from <linux/prctl.h> and <linux/capability.h>.
PR_CAPBSET_DROP = 24
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
LANDLOCK_ACCESS_FS_EXECUTE = 1 << 0
LANDLOCK_ACCESS_FS_WRITE_FILE = 1 << 1
LANDLOCK_ACCESS_FS_READ_FILE = 1 << 2
LANDLOCK_ACCESS_FS_READ_DIR = 1 << 3
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

# Reading a file, listing a folder, running a program: handled always, granted only beneath the
# folders a command may see. A file (not a folder) takes only a file's rights.
READ_ACCESS = LANDLOCK_ACCESS_FS_EXECUTE | LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_READ_DIR
FILE_READ_ACCESS = LANDLOCK_ACCESS_FS_EXECUTE | LANDLOCK_ACCESS_FS_READ_FILE

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
# Character devices any program may read and write (``echo x > /dev/null``,
# randomness, a prompt on the terminal, a pseudo-terminal a program opens):
# writing to them changes no file. The rest of ``/dev`` is not seen (the
# system's ``/dev/shm`` holds other programs' shared memory).
WRITABLE_DEVICES = (
    "/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty", "/dev/ptmx", "/dev/pts",
)

# Each of these lets a process read other processes' environment and memory
# past the checks that stop a plain process (on Linux 6.18, even from inside a
# Landlock domain). Normally only root holds them.
MEMORY_READING_CAPABILITIES = (CAP_SYS_PTRACE, CAP_SYS_ADMIN, CAP_PERFMON)

libc = ctypes.CDLL(None, use_errno=True)


def checked(result: int, what: str) -> int:
    if result < 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}")
    return result


def _landlock_version() -> tuple[int, int]:
    """``landlock_create_ruleset``'s answer to "which ABI?": (the version or -1, errno)."""
    version = libc.syscall(SYS_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0), LANDLOCK_CREATE_RULESET_VERSION)
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


def create_ruleset(
    abi: int, *, readable: list[str] = (), hidden: list[str] = (), writable: list[str] = ()
) -> Ruleset:
    """A Landlock ruleset letting the command read only beneath ``readable`` and ``writable``, but
    nothing beneath ``hidden``, and write only beneath ``writable``.

    Returns it (its fd is close-on-exec). It handles reading (``READ_ACCESS``)
    and every write right (``write_access``): reading is granted beneath each
    readable folder (around the hidden paths in it: ``readable_rules``), both
    beneath each ``writable`` folder (the workspace, the command's own temp
    folder) and on the devices programs use (``writable_rules``): the command
    sees nothing else (the data folder around the workspace included),
    changes nothing else, and makes no device node anywhere.

    The domain it creates matters too: a process in a Landlock domain may not
    read or trace any process outside it. From ABI 6 it also scopes signals:
    the command cannot kill this launcher to escape the clean-up, nor signal
    the server.
    """
    grants = readable_rules(readable, hidden) + writable_rules(abi, writable, hidden)
    handled = READ_ACCESS | write_access(abi)
    attr = (ctypes.c_uint64 * 3)(handled, 0, LANDLOCK_SCOPE_SIGNAL if abi >= 6 else 0)
    # The kernel reads only as much of the struct as its ABI knows.
    size = ctypes.sizeof(attr) if abi >= 6 else ctypes.sizeof(ctypes.c_uint64)
    ruleset = checked(
        libc.syscall(SYS_LANDLOCK_CREATE_RULESET, attr, ctypes.c_size_t(size), 0), "landlock_create_ruleset"
    )
    try:
        for path, access in grants:
            grant(ruleset, path, access)
    except BaseException:
        os.close(ruleset)
        raise
    return Ruleset(ruleset, handled)


def writable_folder_access(abi: int) -> int:
    """Every right in a folder a command may write in, but making device nodes."""
    return READ_ACCESS | (write_access(abi) & ~DEVICE_MAKING)


def readable_rules(readable: list[str], hidden: list[str] = ()) -> list[tuple[str, int]]:
    """What to grant so that a command reads beneath each ``readable`` folder but nothing beneath ``hidden``.

    A folder that is hidden, or lies beneath a hidden one, is not granted; one
    that holds a hidden path is granted around it (``hidden_paths_rules``).
    Symlinked folders (``/lib64`` on a merged ``/usr``) are granted where
    they lead.
    """
    hidden_real = [os.path.realpath(path) for path in hidden if os.path.lexists(path)]
    grants: list[tuple[str, int]] = []
    for folder in dict.fromkeys(os.path.realpath(path) for path in readable):
        if not os.path.exists(folder) or any(folder == path or _is_beneath(folder, path) for path in hidden_real):
            continue
        if not any(_is_beneath(path, folder) for path in hidden_real):
            grants.append((folder, READ_ACCESS if os.path.isdir(folder) else FILE_READ_ACCESS))
            continue
        grants += [
            (path, READ_ACCESS if is_folder else FILE_READ_ACCESS)
            for path, is_folder in hidden_paths_rules(hidden, beneath=folder)
        ]
    return grants


def writable_rules(abi: int, writable: list[str], hidden: list[str] = ()) -> list[tuple[str, int]]:
    """What to grant (each path, and its rights) so that a command reads and writes only beneath
    ``writable`` and on the devices.

    A writable folder gets every right but making device nodes. One that
    holds a hidden file (a workspace set to the data folder itself) is
    granted around it, as reading is (``hidden_paths_rules``): the folders
    around in full, the files around their contents. The folders on the way
    to the hidden file get nothing, so nothing directly in them can be made,
    removed or renamed, and the hidden file stays where the next command's
    rules look for it.
    """
    rights = writable_folder_access(abi)
    contents = FILE_READ_ACCESS | LANDLOCK_ACCESS_FS_WRITE_FILE | (LANDLOCK_ACCESS_FS_TRUNCATE if abi >= 3 else 0)
    device = LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_WRITE_FILE
    grants = [
        (path, device | (LANDLOCK_ACCESS_FS_READ_DIR if os.path.isdir(path) else 0)) for path in WRITABLE_DEVICES
    ]
    hidden_real = [os.path.realpath(path) for path in hidden if os.path.lexists(path)]
    for folder in writable:
        real = os.path.realpath(folder)
        if not any(_is_beneath(path, real) for path in hidden_real):
            grants.append((real, rights))
            continue
        grants += [
            (path, rights if is_folder else contents) for path, is_folder in hidden_paths_rules(hidden, beneath=real)
        ]
    return grants


def _is_beneath(path: str, folder: str) -> bool:
    return path != folder and os.path.commonpath([path, folder]) == folder


def hidden_paths_rules(hidden: list[str], *, beneath: str) -> list[tuple[str, bool]]:
    """What to grant (each path, and whether it is a folder) beneath ``beneath`` so that only what is
    beneath ``hidden`` is out of reach.

    Landlock only grants, beneath a path; it cannot take a file out of a
    grant. So the grants go around each hidden path: every entry of each of
    its parent folders, from ``beneath`` down, except
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


def grant(ruleset: int, path: str, access: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return  # gone meanwhile, or out of reach: nothing to grant
    try:
        attr = _PathBeneathAttr(access, fd)
        checked(
            libc.syscall(SYS_LANDLOCK_ADD_RULE, ruleset, LANDLOCK_RULE_PATH_BENEATH, ctypes.byref(attr), 0),
            f"landlock_add_rule {path}",
        )
    finally:
        os.close(fd)


def drop_privileges() -> None:
    """Drop the capabilities that read other processes' memory (they exist only when the server runs
    as root, and the drop needs root), clear ambient capabilities and set no_new_privs (so no setuid
    program gives them back). Called in the command's process between fork and exec (the launcher
    has one thread, so this is safe)."""
    checked(libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "clear ambient capabilities")
    for capability in MEMORY_READING_CAPABILITIES:
        # EPERM: not root (no CAP_SETPCAP), and under no_new_privs a
        # non-root exec gains no capability anyway; EINVAL: a kernel that
        # predates the capability.
        if libc.prctl(PR_CAPBSET_DROP, capability, 0, 0, 0) < 0 and ctypes.get_errno() not in (
            errno.EPERM, errno.EINVAL,
        ):
            checked(-1, f"drop capability {capability}")
    checked(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")


def restrict_self(ruleset_fd: int) -> None:
    """Enter the Landlock domain, which every descendant inherits and none can leave (after ``drop_privileges``)."""
    checked(libc.syscall(SYS_LANDLOCK_RESTRICT_SELF, ruleset_fd, 0), "landlock_restrict_self")


def enter_sandbox(ruleset_fd: int | None) -> None:
    """``drop_privileges``, then the Landlock domain of ``ruleset_fd`` (None: none, where the kernel has none)."""
    drop_privileges()
    if ruleset_fd is not None:
        restrict_self(ruleset_fd)
