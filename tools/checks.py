"""The tools' system checks: ``manage.py check`` (and ``make doctor``) says whether ``shell.run`` can run here.

The test is the launcher's own (``landlock.sandbox_problem``, the one it
makes before every command), asked in this process: one system call, no
process started, so it is cheap enough for every management command.
``manage.py doctor`` goes further and runs a command in the sandbox.
"""

from __future__ import annotations

from django.core import checks

from tools import landlock

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
