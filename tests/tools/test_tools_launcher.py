"""The launcher shell.run starts its commands from: its pure helpers and its own checks of the kernel.

The end-to-end behaviour (no secret within reach, no process left behind) is
tested through shell.run in test_tools.py.
"""

import os
import subprocess

import pytest

from tools import launcher


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
    assert launcher.landlock_abi() >= 1
