"""``manage.py doctor`` (``make doctor``): can this machine run what Conductor needs, and if not, why not."""

import tempfile
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from tools import landlock
from tools.checks import SIGNAL_SCOPING_ABI
from tools.registry import ToolCall, ToolError
from tools.shell import shell_run, shell_run_trial


def processes_hidden(workspace: Path) -> bool:
    """Whether a command here gets a PID namespace and a /proc of its own: there, its /proc/self is pid 1."""
    call = ToolCall(params={"argv": ["readlink", "/proc/self"]}, workspace=workspace, shell_max_timeout_seconds=10)
    return shell_run(call)["stdout"].strip() == "1"


class Command(BaseCommand):
    help = (
        "Say whether shell.run can run commands here and why not: the test its launcher makes "
        "(as manage.py check does), then a real command (true) in the sandbox."
    )
    requires_system_checks = []

    def handle(self, *args, **options):
        if (problem := landlock.sandbox_problem()) is not None:
            raise CommandError(f"shell.run: cannot run commands here: {problem}")
        abi = landlock.landlock_abi()
        with tempfile.TemporaryDirectory(prefix="conductor-doctor-") as workspace:
            try:
                result = shell_run_trial(workspace=Path(workspace))
            except ToolError as exc:
                raise CommandError(f"shell.run: Landlock ABI {abi}, yet a test command failed: {exc}") from exc
            hidden = processes_hidden(Path(workspace))
        scoped = "signals scoped" if abi >= SIGNAL_SCOPING_ABI else "signals not scoped: Linux 6.12 scopes them"
        self.stdout.write(self.style.SUCCESS(
            f"shell.run: can run commands here (Landlock ABI {abi}, {scoped}; "
            f"`true` ran in the sandbox in {result['duration_ms']} ms)"
        ))
        if hidden:
            self.stdout.write("shell.run: commands see only their own processes (a PID namespace and /proc of their own)")
        else:
            self.stdout.write(self.style.WARNING(
                "shell.run: commands see every process in /proc, and the command lines of this user's: this "
                "machine refuses them a PID namespace with a /proc of its own (a user other than root needs "
                "unprivileged user namespaces for it)"
            ))
