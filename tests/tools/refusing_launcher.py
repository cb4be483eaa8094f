"""``tools/launcher.py`` on a kernel that refuses namespaces: ``unshare`` fails with EPERM, as where
unprivileged user namespaces are disabled. Started by the tests in its place (``shell.LAUNCHER``)."""

import ctypes
import errno
import os
import sys

sys.path.append(os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "tools"))

import isolation  # noqa: E402
import launcher  # noqa: E402


class RefusingUnshare:
    def __init__(self, libc) -> None:
        self._libc = libc

    def __getattr__(self, name):
        return getattr(self._libc, name)

    def unshare(self, flags):
        ctypes.set_errno(errno.EPERM)
        return -1


isolation.libc = RefusingUnshare(isolation.libc)
sys.exit(launcher.main(sys.argv))
