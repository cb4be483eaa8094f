"""``manage.py check`` says whether shell.run can run here, with the launcher's own test."""

import errno
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from tools import checks, landlock


def messages():
    return checks.shell_run_sandbox_check(None)


def test_nothing_to_say_where_the_sandbox_is_whole(monkeypatch):
    monkeypatch.setattr(landlock, "_landlock_version", lambda: (6, 0))
    assert messages() == []


@pytest.mark.django_db  # the project's other checks read it
def test_a_kernel_without_landlock_is_a_warning_saying_why(monkeypatch):
    monkeypatch.setattr(landlock, "_landlock_version", lambda: (-1, errno.EOPNOTSUPP))
    [warning] = messages()
    assert warning.id == "tools.W001" and warning.level == checks.checks.WARNING
    assert warning.msg == f"shell.run cannot run commands on this machine: {landlock.landlock_refusal(-1, errno.EOPNOTSUPP)}."
    out = StringIO()
    call_command("check", stdout=out, stderr=out)
    assert "tools.W001" in out.getvalue() and "lsm= boot parameter" in out.getvalue()


def test_a_kernel_before_signal_scoping_is_a_note(monkeypatch):
    monkeypatch.setattr(landlock, "_landlock_version", lambda: (4, 0))
    [note] = messages()
    assert note.id == "tools.I001" and note.level == checks.checks.INFO and "ABI 4" in note.msg


def test_doctor_runs_a_command_in_the_sandbox(tmp_path):
    out = StringIO()
    call_command("doctor", stdout=out)
    assert "shell.run: can run commands here (Landlock ABI" in out.getvalue()
    assert "a command ran in the sandbox" in out.getvalue()
    assert "commands run confined: the system's files read-only and their workspace, no network, " \
           "only their own processes" in out.getvalue()


def test_doctor_says_why_not(monkeypatch):
    monkeypatch.setattr(landlock, "_landlock_version", lambda: (-1, errno.ENOSYS))
    with pytest.raises(CommandError, match="shell.run: cannot run commands here: this kernel has no Landlock"):
        call_command("doctor")
