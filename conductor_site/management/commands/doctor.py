"""``manage.py doctor`` (``make doctor``): can this machine run what Conductor needs, and if not, why not."""

import tempfile
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from tools import landlock
from tools.checks import SIGNAL_SCOPING_ABI, SandboxState, shell_sandbox_state


class Command(BaseCommand):
    help = (
        "Say whether shell.run can run commands here, confined or not, and why not: the test its launcher "
        "makes (as manage.py check does), then a real command in the sandbox."
    )
    requires_system_checks = []

    def handle(self, *args, **options):
        allowed = settings.CONDUCTOR_SHELL_UNCONFINED
        if (problem := landlock.sandbox_problem()) is not None and not allowed:
            raise CommandError(f"shell.run: cannot run commands here: {problem}")
        with tempfile.TemporaryDirectory(prefix="conductor-doctor-") as workspace:
            state = shell_sandbox_state(workspace=Path(workspace), unconfined_allowed=allowed)
        if state.state == SandboxState.REFUSED:
            raise CommandError(f"shell.run: cannot run commands here: {state.sentence()}")
        if state.state == SandboxState.UNCONFINED:
            self.stdout.write(self.style.WARNING(f"shell.run: {state.sentence()}"))
            return
        abi = state.abi
        scoped = "signals scoped" if abi >= SIGNAL_SCOPING_ABI else "signals not scoped: Linux 6.12 scopes them"
        self.stdout.write(self.style.SUCCESS(
            f"shell.run: can run commands here (Landlock ABI {abi}, {scoped}; "
            f"a command ran in the sandbox in {state.duration_ms} ms)"
        ))
        self.stdout.write(f"shell.run: {state.sentence()}")
