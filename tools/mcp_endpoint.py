"""How to reach one MCP server (``McpEndpoint``), and how a stdio server's process is started:
its environment, its folder and its sandboxed command line (see ``tools/mcp_client.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from tools.shell import LAUNCHER, SAFE_PATH, launcher_paths
from tools.workspace import workspace_root


@dataclass(frozen=True)
class McpEndpoint:
    """How to reach one MCP server: a stdio command, or a Streamable HTTP URL.

    ``env`` and ``headers`` hold resolved values, secrets included: they are
    left out of ``repr`` so that no log line can carry them.
    """

    name: str
    command: str = ""
    args: tuple[str, ...] = ()
    cwd: str = ""
    url: str = ""
    env: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    timeout_seconds: float = 60.0
    # Files a stdio server may not read, whatever name it uses (the server's secret key: CONDUCTOR_SECRET_FILES).
    hidden_files: tuple[str, ...] = ()
    # Whether a URL may reach loopback, link-local and private addresses (CONDUCTOR_MCP_ALLOW_PRIVATE_URLS).
    allow_private_urls: bool = False

    @property
    def is_stdio(self) -> bool:
        return not self.url



def server_environment(
    endpoint: McpEndpoint, workspace: Path, own: dict[str, str] | None = None
) -> dict[str, str]:
    """A stdio server's environment: ``shell.run``'s minimal one, its ``own`` folders', then its configured variables."""
    return {
        "PATH": SAFE_PATH, "LANG": "C.UTF-8", "HOME": str(workspace_root(workspace)), **(own or {}),
        **dict(endpoint.env),
    }


def sandboxed_argv(endpoint: McpEndpoint, writable: tuple[Path, ...] = ()) -> list[str]:
    """The interpreter's arguments that start a stdio server's command in the sandbox (``launcher.py exec``).

    The server may write only beneath ``writable`` (the workspace and its own folders).
    """
    # -I -S: the launcher sees neither PYTHON* variables nor site-packages (as shell.run's).
    paths = launcher_paths(hidden=endpoint.hidden_files, writable=writable)
    return ["-I", "-S", str(LAUNCHER), "exec", *paths, "--", endpoint.command, *endpoint.args]


def server_folder(endpoint: McpEndpoint, workspace: Path) -> Path:
    """Where a stdio server runs: its configured folder (relative ones in the workspace), else the workspace."""
    root = workspace_root(workspace)
    return root / endpoint.cwd if endpoint.cwd else root
