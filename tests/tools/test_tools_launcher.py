"""The launcher shell.run starts its commands from: its pure helpers and its own checks of the kernel.

The end-to-end behaviour (no secret within reach, no process left behind) is
tested through shell.run in test_tools.py.
"""

import errno
import os
import socket
import subprocess

import pytest

from tools import landlock, launcher


@pytest.mark.parametrize("stat,expected", [
    ("1234 (sleep) S 99 1234 1234 0 -1 4194560", 99),
    ("1234 (a b) c) R 7 1234 1234 0 -1", 7),  # a command name may hold spaces and ")"
    ("1234 ()) Z 1 0 0", 1),
])
def test_parent_pid_is_read_past_the_command_name(stat, expected):
    assert launcher.parent_pid(stat) == expected


def test_child_pids_lists_the_children_of_a_process():
    child = subprocess.Popen(["sleep", "60"])
    try:
        assert child.pid in launcher.child_pids(os.getpid())
    finally:
        child.kill()
        child.wait()
    assert child.pid not in launcher.child_pids(os.getpid())


def test_this_kernel_has_landlock():
    # shell.run refuses to run without it; a failure here explains the others.
    assert landlock.landlock_abi() >= 1


# --- whether the sandbox exists here: the launcher's test, also manage.py check's and make doctor's ---


@pytest.mark.parametrize("version, code, words", [
    (7, 0, None),
    (1, 0, None),
    (-1, errno.EOPNOTSUPP, "built into this kernel but not enabled"),
    (-1, errno.ENOSYS, "needs Linux 5.13 or newer"),
    (-1, errno.EPERM, "seccomp filter"),
    (-1, errno.EINVAL, "landlock_create_ruleset failed: Invalid argument"),
])
def test_landlock_refusal_says_why_the_kernels_answer_leaves_no_sandbox(version, code, words):
    refusal = landlock.landlock_refusal(version, code)
    assert refusal is None if words is None else words in refusal


def test_this_kernel_gives_the_sandbox_even_without_securityfs():
    # The README's old hint read /sys/kernel/security/lsm, absent on many machines where Landlock works.
    assert landlock.sandbox_problem() is None


def test_the_launcher_refuses_to_start_a_command_for_the_reason_the_check_gives(monkeypatch, tmp_path):
    monkeypatch.setattr(landlock, "_landlock_version", lambda: (-1, errno.EOPNOTSUPP))
    status, _ = socket.socketpair()
    with status:
        report = launcher.run(["touch", str(tmp_path / "ran")], status)
    assert report == {"error": "sandbox", "detail": landlock.landlock_refusal(-1, errno.EOPNOTSUPP)}
    assert not (tmp_path / "ran").exists()
