"""The namespaces and the socket filter a ``shell.run`` command runs in, beside its Landlock domain
(``tools/landlock.py``; see ``tools/launcher.py`` for the order they are entered in).

- A PID namespace, and a ``/proc`` of its own: the command sees only its own
  processes, and is the namespace's first process, whose exit kills every
  process left in it.
- A network namespace, unless a tool policy allows the network: the command
  has a loopback of its own (up, so that a program may talk to itself) and
  no other interface, so it reaches neither the internet nor this machine's
  loopback, where the server, its database and Redis listen.
- A socket filter (seccomp), with the network namespace: a command may open
  only IP and netlink sockets, all of them in its own namespace. Unix
  sockets are named by paths a network namespace does not hide (PostgreSQL's
  ``/run/postgresql/.s.PGSQL.5432``, Redis's), and Landlock does not check a
  socket's connect, so the command may not make one at all; ``socketpair``
  (a pipe between its own processes) still works. io_uring, which can make
  sockets past the filter, is refused too.
- A private ``/dev/shm``: the system's holds other programs' shared memory
  (PostgreSQL's segments among them).

As root the launcher makes the namespaces directly; another user needs a
user namespace around them (mapping the user to itself), which a kernel may
refuse (unprivileged user namespaces disabled, a container's seccomp filter,
an AppArmor restriction): then the command runs only where the operator said
it may run unconfined (``CONDUCTOR_SHELL_UNCONFINED``).

Standard library only, as the launcher.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import platform
import socket
import struct

if __package__:
    from tools.landlock import checked  # imported by the server and its tests
else:
    from landlock import checked  # beside the launcher, run as a script (see launcher.py)

# unshare(2) flags, from <linux/sched.h>; mount(2) flags, from <linux/mount.h>.
CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x00020000, 0x10000000, 0x20000000, 0x40000000
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REC, MS_PRIVATE = 2, 4, 8, 1 << 14, 1 << 18

# ioctl(2) requests and interface flags, from <linux/sockios.h> and <linux/if.h>.
SIOCGIFFLAGS, SIOCSIFFLAGS = 0x8913, 0x8914
IFF_UP, IFF_RUNNING = 0x1, 0x40

# prctl(2) and seccomp(2), from <linux/prctl.h>, <linux/seccomp.h> and <linux/filter.h>.
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_RET_ERRNO = 0x00050000
BPF_LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
BPF_JEQ_K = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
BPF_JGE_K = 0x35  # BPF_JMP | BPF_JGE | BPF_K
BPF_RET_K = 0x06  # BPF_RET | BPF_K
# struct seccomp_data: int nr; __u32 arch; __u64 instruction_pointer; __u64 args[6].
SECCOMP_NR, SECCOMP_ARCH, SECCOMP_ARG0 = 0, 4, 16
# x86_64's x32 system calls carry this bit: refused, so none reaches socket(2) under another number.
X32_SYSCALL_BIT = 0x40000000
IO_URING_SETUP = 425  # the same number on every architecture the filter knows


# Per machine: (AUDIT_ARCH_*, the socket(2) number). Elsewhere the filter is not known,
# and a command runs only where the operator allows it unconfined.
ARCHITECTURES = {
    "x86_64": (0xC000003E, 41),
    "aarch64": (0xC00000B7, 198),
}

# The socket families a command without network may open: all of them live in its own network namespace.
OWN_NAMESPACE_FAMILIES = (socket.AF_INET, socket.AF_INET6, socket.AF_NETLINK)

libc = ctypes.CDLL(None, use_errno=True)


def own_namespaces(*, network: bool) -> str | None:
    """Move this launcher into a network namespace of its own (unless ``network``) and start its
    children in a PID namespace of their own; None when it could, else why not.

    Not root: inside a user namespace that maps the user to itself, so the
    launcher holds the capabilities the mounts and the loopback need there.
    """
    flags = CLONE_NEWPID | (0 if network else CLONE_NEWNET)
    try:
        if os.geteuid() == 0:
            checked(libc.unshare(flags), "unshare")
        else:
            uid, gid = os.geteuid(), os.getegid()
            checked(libc.unshare(CLONE_NEWUSER | flags), "unshare")
            for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
                with open(f"/proc/self/{name}", "w") as file:
                    file.write(text)
        if not network:
            loopback_up()
    except OSError as exc:
        what = "namespaces" if network else "network namespace"
        return f"the kernel refused a PID and {what}: {exc.strerror or exc}"
    return None


def loopback_up() -> None:
    """Bring up ``lo`` of this (new) network namespace: 127.0.0.1 and ::1 of the command's own."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(sock, SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock, SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | IFF_UP | IFF_RUNNING))


def mount_own_proc_and_shm() -> None:
    """In the namespace's first process: a mount namespace of its own, with a ``/proc`` showing only
    the namespace and an empty ``/dev/shm``.

    The mounts are made private first, so that the new ones stay in this
    namespace. Raises OSError when the kernel refuses (a ``/proc`` partly
    hidden by a container's mounts, say).
    """
    checked(libc.unshare(CLONE_NEWNS), "unshare")
    checked(libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "make the mounts private")
    checked(libc.mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None), "mount /proc")
    if os.path.isdir("/dev/shm"):
        checked(libc.mount(b"tmpfs", b"/dev/shm", b"tmpfs", MS_NOSUID | MS_NODEV, b"mode=1777,size=64m"),
                "mount /dev/shm")


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


def socket_filter_program(machine: str) -> list[tuple[int, int, int, int]]:
    """The seccomp program (code, jt, jf, k) refusing every socket but ``OWN_NAMESPACE_FAMILIES``, and io_uring.

    Raises LookupError for a machine whose system call numbers it does not know.
    """
    arch, socket_nr = ARCHITECTURES[machine]
    refuse_acces = SECCOMP_RET_ERRNO | 13  # EACCES: "Permission denied", as the file system says
    refuse_nosys = SECCOMP_RET_ERRNO | 38  # ENOSYS: another architecture's system calls
    families = OWN_NAMESPACE_FAMILIES
    program = [
        (BPF_LD_W_ABS, 0, 0, SECCOMP_ARCH),
        (BPF_JEQ_K, 1, 0, arch),
        (BPF_RET_K, 0, 0, refuse_nosys),
        (BPF_LD_W_ABS, 0, 0, SECCOMP_NR),
        (BPF_JGE_K, 0, 1, X32_SYSCALL_BIT),
        (BPF_RET_K, 0, 0, refuse_nosys),
        (BPF_JEQ_K, 0, 1, IO_URING_SETUP),
        (BPF_RET_K, 0, 0, refuse_acces),
        (BPF_JEQ_K, 0, len(families) + 2, socket_nr),  # not socket(2): to the allow at the end
        (BPF_LD_W_ABS, 0, 0, SECCOMP_ARG0),  # the family: the argument's low 32 bits (little-endian)
    ]
    for left, family in enumerate(families):
        program.append((BPF_JEQ_K, len(families) - left, 0, int(family)))  # one of them: to the allow
    program += [(BPF_RET_K, 0, 0, refuse_acces), (BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW)]
    return program


def socket_filter_problem() -> str | None:
    """Why this machine cannot filter a command's sockets, or None."""
    if platform.machine() not in ARCHITECTURES:
        return f"no socket filter for this machine ({platform.machine()}): only for {', '.join(ARCHITECTURES)}"
    return None


def enter_socket_filter() -> None:
    """Install the socket filter on this process (and every descendant). Needs no_new_privs set first."""
    program = socket_filter_program(platform.machine())
    instructions = (_SockFilter * len(program))(*(_SockFilter(*instruction) for instruction in program))
    fprog = _SockFprog(len(program), instructions)
    checked(libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0), "seccomp")
