"""``manage.py doctor`` (``make doctor``): can this machine run what Conductor needs, and if not, why not."""

import tempfile
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from tools import launcher
from tools.checks import SIGNAL_SCOPING_ABI
from tools.registry import ToolError
from tools.shell import shell_run_trial


class Command(BaseCommand):
    help = (
        "Say whether shell.run can run commands here and why not: the test its launcher makes "
        "(as manage.py check does), then a real command (true) in the sandbox."
    )
    requires_system_checks = []

    def handle(self, *args, **options):
        if (problem := launcher.sandbox_problem()) is not None:
            raise CommandError(f"shell.run: cannot run commands here: {problem}")
        abi = launcher.landlock_abi()
        with tempfile.TemporaryDirectory(prefix="conductor-doctor-") as workspace:
            try:
                result = shell_run_trial(workspace=Path(workspace))
            except ToolError as exc:
                raise CommandError(f"shell.run: Landlock ABI {abi}, yet a test command failed: {exc}") from exc
        scoped = "signals scoped" if abi >= SIGNAL_SCOPING_ABI else "signals not scoped: Linux 6.12 scopes them"
        self.stdout.write(self.style.SUCCESS(
            f"shell.run: can run commands here (Landlock ABI {abi}, {scoped}; "
            f"`true` ran in the sandbox in {result['duration_ms']} ms)"
        ))
