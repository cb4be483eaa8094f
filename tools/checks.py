"""The tools' system checks: ``manage.py check`` (and ``make doctor``) says whether ``shell.run`` can run here.

The check's test is the launcher's own (``landlock.sandbox_problem``, the one it
makes before every command), asked in this process: one system call, no
process started, so it is cheap enough for every management command.
``manage.py doctor`` and the server's start go further (``shell_sandbox_state``)
and run a command in the sandbox, which also tries the namespaces.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from django.core import checks

from tools import landlock
from tools.registry import ToolError
from tools.shell import UNCONFINED_SETTING, shell_run_trial

# From this Landlock ABI (Linux 6.12) the sandbox also scopes signals.
SIGNAL_SCOPING_ABI = 6


@checks.register("tools")
def shell_run_sandbox_check(app_configs, **kwargs) -> list[checks.CheckMessage]:
    """A warning when ``shell.run`` cannot run commands here (and why); a note when its sandbox is partial."""
    if (problem := landlock.sandbox_problem()) is not None:
        return [checks.Warning(
            f"shell.run cannot run commands on this machine: {problem}.",
            hint="Every shell.run block, and every MCP server started as a command (stdio), fails with this "
                 "error until it can; the other tools work. "
                 "The sandbox needs Linux 5.13 or newer with Landlock enabled.",
            id="tools.W001",
        )]
    abi = landlock.landlock_abi()
    if abi < SIGNAL_SCOPING_ABI:
        return [checks.Info(
            f"shell.run runs, but its commands may signal processes outside the sandbox (the server, its "
            f"launcher): Landlock ABI {abi} does not scope signals (ABI {SIGNAL_SCOPING_ABI}, Linux 6.12, does).",
            id="tools.I001",
        )]
    return []


@dataclass(frozen=True)
class SandboxState:
    """Whether ``shell.run`` runs its commands confined here (SPEC §5.1)."""

    CONFINED = "confined"  # Landlock, no network, its own processes: as designed
    UNCONFINED = "unconfined"  # the kernel refuses a part, and CONDUCTOR_SHELL_UNCONFINED says to run anyway
    REFUSED = "refused"  # the kernel refuses a part: commands are refused

    state: str
    missing: str  # what the kernel refuses ("" when confined)
    abi: int
    duration_ms: int | None = None  # the trial command's, when one ran

    def sentence(self) -> str:
        """What it means, in one line, for ``doctor`` and the start's log."""
        if self.state == self.CONFINED:
            return ("commands run confined: the system's files read-only and their workspace, no network, "
                    "only their own processes")
        if self.state == self.UNCONFINED:
            return f"commands run UNCONFINED ({UNCONFINED_SETTING}=1): {self.missing}"
        return f"commands are refused: {self.missing} (set {UNCONFINED_SETTING}=1 to run them unconfined)"


def shell_sandbox_state(*, workspace: Path, unconfined_allowed: bool) -> SandboxState:
    """Try the sandbox with a command (``readlink /proc/self``) in ``workspace``, and say how it stands."""
    abi = landlock.landlock_abi()
    missing = landlock.sandbox_problem() or ""
    duration = None
    if not missing:
        try:
            result = shell_run_trial(workspace=workspace, argv=("readlink", "/proc/self"), unconfined=True)
        except ToolError as exc:
            missing = str(exc)
        else:
            missing, duration = result["unconfined"], result["duration_ms"]
            if not missing and result["stdout"].strip() != "1":
                missing = "the command saw other processes than its own"
    if not missing:
        return SandboxState(SandboxState.CONFINED, "", abi, duration)
    state = SandboxState.UNCONFINED if unconfined_allowed else SandboxState.REFUSED
    return SandboxState(state, missing, abi, duration)
