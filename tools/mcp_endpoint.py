"""How to reach one MCP server (``McpEndpoint``), and how a stdio server's process is started:
its environment, its folder and its sandboxed command line (see ``tools/mcp_client.py``).

A stdio server gets ``shell.run``'s file confinement (``tools/shell.py``) but keeps the network
(an operator configured it, and many servers call an API): it reads the system's folders and the
places its own command line names (``server_readable``), reads and writes the workspace, its own
home (kept between sessions, outside the workspace) and temp folder, and the folders its entry
names ``writable``; it sees nothing of the data folder around them.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from tools.shell import LAUNCHER, SAFE_PATH, SYSTEM_FOLDERS, launcher_options
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
    # stdio: its home, kept between sessions ("": one made for each session); folders it may
    # write in besides; folders of the server's own state it may never see (the data folder);
    # whether it runs where the kernel refuses its sandbox (CONDUCTOR_SHELL_UNCONFINED).
    home: str = ""
    writable: tuple[str, ...] = ()
    private_folders: tuple[str, ...] = ()
    unconfined: bool = False

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


def sandboxed_argv(endpoint: McpEndpoint, writable: tuple[Path, ...] = (), readable: tuple[str, ...] = ()) -> list[str]:
    """The interpreter's arguments that start a stdio server's command in the sandbox (``launcher.py exec``).

    The server reads the system's folders and ``readable`` (``server_readable``), and reads and
    writes beneath ``writable`` (the workspace, its own folders) and its entry's ``writable``.
    """
    # -I -S: the launcher sees neither PYTHON* variables nor site-packages (as shell.run's).
    options = launcher_options(
        readable=(*SYSTEM_FOLDERS, *readable), hidden=(*endpoint.private_folders, *endpoint.hidden_files),
        writable=(*writable, *endpoint.writable), unconfined=endpoint.unconfined,
    )
    return ["-I", "-S", str(LAUNCHER), "exec", *options, "--", endpoint.command, *endpoint.args]


def _installation(path: str) -> str:
    """The folder a program or script at ``path`` is installed in: its own, or above a ``bin`` (a prefix, a venv,
    ``node_modules/.bin``)."""
    folder = os.path.dirname(path)
    return os.path.dirname(folder) if os.path.basename(folder) in ("bin", ".bin") else folder


def _interpreter(script: str, path: str) -> str | None:
    """The program a script's ``#!`` line names (``/usr/bin/env NAME``: NAME on ``path``), or None."""
    try:
        with open(script, "rb") as file:
            first = file.readline(256)
    except OSError:
        return None
    words = first[2:].decode(errors="replace").split() if first.startswith(b"#!") else []
    if not words:
        return None
    if os.path.basename(words[0]) == "env":
        names = [word for word in words[1:] if not word.startswith("-")]
        return shutil.which(names[0], path=path) if names else None
    return words[0]


def server_readable(endpoint: McpEndpoint, workspace: Path, env: dict[str, str]) -> tuple[str, ...]:
    """The places a stdio server's own command line names, which it may read besides the system's folders.

    Its working folder; the installation of its command and of the
    interpreter its ``#!`` line names (``_installation``, as found on its
    ``PATH`` and where its symlinks lead: a venv's ``python`` and the
    interpreter it links to); and each absolute path among its arguments
    that exists (a script's folder, or a folder itself). Hidden paths stay
    hidden whatever it names (``landlock.readable_rules``).
    """
    path = env.get("PATH", SAFE_PATH)
    places = [str(server_folder(endpoint, workspace))]
    found = shutil.which(endpoint.command, path=path) if endpoint.command else None
    for program in (found, _interpreter(found, path) if found else None):
        if program:
            places += [_installation(os.path.abspath(program)), _installation(os.path.realpath(program))]
    for argument in endpoint.args:
        if not argument.startswith("/") or not os.path.exists(argument):
            continue
        for path in dict.fromkeys((argument, os.path.realpath(argument))):
            places.append(path if os.path.isdir(path) else _installation(path))
    return tuple(dict.fromkeys(places))


def server_folder(endpoint: McpEndpoint, workspace: Path) -> Path:
    """Where a stdio server runs: its configured folder (relative ones in the workspace), else the workspace."""
    root = workspace_root(workspace)
    return root / endpoint.cwd if endpoint.cwd else root
