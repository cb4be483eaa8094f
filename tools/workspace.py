"""The workspace sandbox: every path a tool touches resolves inside ``CONDUCTOR_WORKSPACE``.

A path given by the chat is relative to the workspace. It is refused when it
is absolute, or when, once ``..`` and every symlink along it are resolved, it
lands outside the workspace. Files are then opened without following a
symlink in the last component, so a link planted between the check and the
open cannot lead out either. (A directory higher up swapped for a link in
that instant is the one race left; it needs a process already able to write
in the workspace, which is what the sandbox keeps the chat from being.)
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

from tools.registry import ToolError


class OutsideWorkspace(ToolError):
    pass


def workspace_root(workspace: Path) -> Path:
    """The workspace folder, created when missing, with every symlink resolved."""
    workspace.mkdir(parents=True, exist_ok=True)
    return workspace.resolve(strict=True)


def workspace_path(workspace: Path, path: str) -> Path:
    """The real path ``path`` names inside the workspace; raises ``OutsideWorkspace`` otherwise.

    The path need not exist (a file about to be written). Symlinks are
    followed as far as they exist, so a link pointing out is refused.
    """
    root = workspace_root(workspace)
    if "\x00" in path:
        raise OutsideWorkspace(f"path {path!r} contains a NUL byte")
    if PurePosixPath(path).is_absolute() or os.path.isabs(path):
        raise OutsideWorkspace(f"path {path!r} is absolute; give a path relative to the workspace")
    resolved = (root / path).resolve(strict=False)
    if not resolved.is_relative_to(root):
        raise OutsideWorkspace(f"path {path!r} leads outside the workspace")
    return resolved


def workspace_relative(workspace: Path, path: Path) -> str:
    """How the chat names ``path``: relative to the workspace, with forward slashes."""
    relative = path.relative_to(workspace_root(workspace)).as_posix()
    return relative or "."
