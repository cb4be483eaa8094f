"""``files.list``, ``files.read`` and ``files.write``: the workspace's files (SPEC §5.1).

Every path goes through ``workspace_path`` first; see ``tools.workspace``.
Only regular files are read or written. A FIFO would block the open (or the
read) until another process came along, a socket cannot be opened, and a
device may act on being opened; so a path is looked at before it is opened,
opened without blocking, and looked at again through the open descriptor.
"""

from __future__ import annotations

import codecs
import contextlib
import errno
import fnmatch
import hashlib
import mimetypes
import os
import stat
from pathlib import Path
from typing import Any

from tools.registry import ToolCall, ToolError
from tools.workspace import workspace_path, workspace_relative, workspace_root

DEFAULT_MAX_BYTES = 65536
# The most ``files.read`` reads. Text comes back as JSON (ASCII), where a
# byte may take up to six bytes (a control, or a bad byte as ``\\ufffd``) and
# others up to three (a four-byte character as two ``\\uXXXX``). Text (see
# ``looks_binary``) has at most a quarter of the first kind, so at most 3.75
# bytes a byte: 256 KiB of it stays within the 1 MiB a stored result may take
# (CONDUCTOR_RESULT_STORE_MAX_BYTES).
MAX_READ_BYTES = 256 * 1024
# Bytes that do not occur in text: C0 controls other than tab, line breaks,
# form feed, backspace and escape, and DEL.
_CONTROL_BYTES = bytes(sorted(set(range(0x20)) - set(b"\t\n\v\f\r\b\x1b"))) + b"\x7f"
# A file is binary when more than this share of what was read is not text
# (bytes that are not UTF-8, or control bytes) ...
BINARY_SHARE = 0.25
# ... and there are more than this many such bytes: a short text with a few
# bad bytes still reads as text, with U+FFFD for each.
BINARY_MIN_COUNT = 8
MAX_LIST_ENTRIES = 1000
READ_CHUNK = 65536


def _refuse(exc: OSError, name: str) -> ToolError:
    """The OS's complaint about ``name``, as one line the chat can act on."""
    reasons = {
        errno.ENOENT: "no such file or folder",
        errno.EEXIST: "already exists (use mode \"overwrite\" or \"append\")",
        errno.EISDIR: "is a folder",
        errno.ENOTDIR: "is not a folder",
        errno.EACCES: "permission denied",
        errno.EPERM: "permission denied",
        errno.ELOOP: "is a symlink; file tools do not follow symlinks",
        errno.ENOSPC: "no space left on the device",
        errno.EFBIG: "file too large",
        # A FIFO with no reader, opened for writing without blocking, or a socket.
        errno.ENXIO: "is not a regular file",
    }
    return ToolError(f"{name}: {reasons.get(exc.errno, exc.strerror or str(exc))}")


def _open(path: Path, flags: int, name: str) -> int:
    # O_NOFOLLOW: a symlink put in place after workspace_path checked the
    # path must not be followed out of the workspace. O_NONBLOCK: a FIFO put
    # in place after the check must not block the open; it changes nothing
    # for a regular file.
    try:
        return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, 0o644)
    except OSError as exc:
        raise _refuse(exc, name) from exc


def _special_kind(mode: int) -> str | None:
    """What a file that is neither regular, a folder nor a symlink is ("a FIFO"), or None."""
    kinds = {
        stat.S_IFIFO: "a FIFO",
        stat.S_IFSOCK: "a socket",
        stat.S_IFCHR: "a character device",
        stat.S_IFBLK: "a block device",
    }
    return kinds.get(stat.S_IFMT(mode))


def _not_regular(name: str, mode: int) -> ToolError:
    if stat.S_ISDIR(mode):
        return ToolError(f"{name}: is a folder")
    return ToolError(f"{name}: is {_special_kind(mode) or 'not a regular file'}, not a regular file")


def _open_regular(path: Path, flags: int, name: str) -> tuple[int, os.stat_result]:
    """An open descriptor of ``path`` and its status, when it is a regular file; raises ``ToolError`` otherwise.

    Never blocks: a FIFO, socket or device is refused before it is opened,
    and one swapped in between the look and the open is opened without
    blocking and refused through its descriptor. A missing path goes on to
    the open, which creates it or says it is missing.
    """
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        pass
    else:
        if _special_kind(mode):
            raise _not_regular(name, mode)
    fd = _open(path, flags, name)
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise _not_regular(name, info.st_mode)
    return fd, info


def _secret_inodes(call: ToolCall) -> set[tuple[int, int]]:
    inodes = set()
    for secret in call.secret_files:
        try:
            info = os.stat(secret)
        except OSError:
            continue
        inodes.add((info.st_dev, info.st_ino))
    return inodes


def _refuse_secret(call: ToolCall, info: os.stat_result, name: str) -> None:
    """Refuse a file that is one of the server's secret files (``ToolCall.secret_files``), under any name.

    A workspace set to the data folder, or to the project folder that holds
    the ``.env``, would otherwise hand the secret key to any chat.
    """
    if (info.st_dev, info.st_ino) in _secret_inodes(call):
        raise ToolError(f"{name}: holds the server's secret key; file tools do not read or write it")


def _entry_type(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISREG(mode):
        return "file"
    return "other"


def reported_name(name: str) -> tuple[str, bool]:
    """A file name as a result reports it, and whether it had to be escaped.

    Python reads a name that is not valid UTF-8 with each bad byte as a lone
    surrogate (``\\udcff``), which no valid JSON text or frame may carry. Such
    a name is reported with each bad byte written ``\\xNN`` instead
    (``badname-\\xffx``), and flagged, since a valid name may hold those four
    characters too.
    """
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return os.fsencode(name).decode("utf-8", "backslashreplace"), True
    return name, False


def files_list(call: ToolCall) -> dict[str, Any]:
    """Entries of a folder whose path relative to it matches ``glob``; symlinks are listed, not followed.

    A glob with a ``/`` or ``**`` walks sub-folders too. A name that is not
    valid UTF-8 is escaped and its entry says ``"escaped": true`` (``reported_name``).
    """
    name = call.params.get("path", ".")
    pattern = call.params.get("glob", "*")
    folder = workspace_path(call.workspace, name)
    if not folder.is_dir():
        raise ToolError(f"{name}: {'is not a folder' if folder.exists() else 'no such file or folder'}")

    if "/" in pattern or "**" in pattern:
        candidates = (
            os.path.relpath(os.path.join(top, entry), folder)
            for top, dirs, files in os.walk(folder)  # does not descend into symlinked folders
            for entry in sorted(dirs) + sorted(files)
        )
    else:
        candidates = (entry.name for entry in os.scandir(folder))

    entries, truncated = [], False
    for relative in sorted(candidates):
        relative = relative.replace(os.sep, "/")
        if not fnmatch.fnmatchcase(relative, pattern):
            continue
        if len(entries) == MAX_LIST_ENTRIES:
            truncated = True
            break
        info = os.lstat(folder / relative)
        entry_type = _entry_type(info.st_mode)
        # A folder's st_size says nothing about its contents.
        size = None if stat.S_ISDIR(info.st_mode) else info.st_size
        shown, is_escaped = reported_name(relative)
        entry = {"name": shown, "type": entry_type, "size": size}
        if is_escaped:
            entry["escaped"] = True
        entries.append(entry)
    return {"path": workspace_relative(call.workspace, folder), "entries": entries, "truncated": truncated}


def looks_binary(data: bytes, text: str) -> bool:
    """Whether ``data`` (``text`` is its UTF-8 decoding with U+FFFD for bad bytes) is not text.

    A NUL byte says so at once; otherwise more than ``BINARY_SHARE`` of the
    bytes (and more than ``BINARY_MIN_COUNT``) are undecodable or controls.
    """
    if b"\0" in data:
        return True
    # Each U+FFFD the decoder added stands for at least one bad byte; a U+FFFD
    # the file itself holds (three bytes EF BF BD) is text.
    undecodable = text.count("\ufffd") - data.count("\ufffd".encode())
    controls = len(data) - len(data.translate(None, _CONTROL_BYTES))
    suspicious = undecodable + controls
    return suspicious > BINARY_MIN_COUNT and suspicious > BINARY_SHARE * len(data)


def _binary_description(call: ToolCall, handle, path: Path, info: os.stat_result) -> dict[str, Any]:
    """What ``files.read`` says of a binary file instead of its bytes: size, type by name, SHA-256 of all of it."""
    digest = hashlib.sha256()
    handle.seek(0)
    while chunk := handle.read(READ_CHUNK):
        if call.cancelled.is_set():
            raise ToolError("cancelled while hashing the file")
        digest.update(chunk)
    return {
        "path": workspace_relative(call.workspace, path),
        "binary": True,
        "size": info.st_size,
        "type": mimetypes.guess_type(path.name, strict=False)[0],
        "sha256": digest.hexdigest(),
    }


def files_read(call: ToolCall) -> dict[str, Any]:
    """Up to ``max_bytes`` of a file as UTF-8 text; bad bytes become U+FFFD.

    A binary file (``looks_binary``) is described instead (``"binary": true``,
    its size, its type as its name suggests, the SHA-256 of the whole file):
    escaped bytes would say nothing to the chat and take six times their size.
    """
    name = call.params["path"]
    max_bytes = min(call.params.get("max_bytes", DEFAULT_MAX_BYTES), MAX_READ_BYTES)
    path = workspace_path(call.workspace, name)
    fd, info = _open_regular(path, os.O_RDONLY, name)
    with os.fdopen(fd, "rb") as handle:
        _refuse_secret(call, info, name)
        data = handle.read(max_bytes)
        is_truncated = len(data) == max_bytes and handle.read(1) != b""
        # A cut through a multi-byte character is dropped rather than shown as U+FFFD.
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        text = decoder.decode(data, final=not is_truncated)
        if looks_binary(data, text):
            return _binary_description(call, handle, path, info)
    return {
        "path": workspace_relative(call.workspace, path),
        "text": text,
        "size": info.st_size,
        "truncated": is_truncated,
    }


WRITE_FLAGS = {
    "create": os.O_WRONLY | os.O_CREAT | os.O_EXCL,
    "overwrite": os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
    "append": os.O_WRONLY | os.O_CREAT | os.O_APPEND,
}


def files_write_plan(call: ToolCall) -> dict[str, Any]:
    """The real path ``files_write`` would write, how, and how many bytes."""
    path = workspace_path(call.workspace, call.params["path"])
    if path == workspace_root(call.workspace):
        raise ToolError(f"{call.params['path']}: is the workspace folder itself")
    return {
        "file": str(path), "mode": call.params.get("mode", "create"),
        "bytes": len(call.params["content"].encode("utf-8", "surrogatepass")),
    }


def files_write(call: ToolCall) -> dict[str, Any]:
    """Write ``content`` (UTF-8) in ``mode`` (``create`` by default: an existing file is an error).

    Missing parent folders are created, inside the workspace.
    """
    name = call.params["path"]
    mode = call.params.get("mode", "create")
    path = workspace_path(call.workspace, name)
    if path == workspace_root(call.workspace):
        raise ToolError(f"{name}: is the workspace folder itself")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _refuse(exc, str(Path(name).parent)) from exc
    data = call.params["content"].encode("utf-8")
    with contextlib.suppress(FileNotFoundError):
        # Before the open, which may truncate it.
        _refuse_secret(call, os.lstat(path), name)
    fd, _ = _open_regular(path, WRITE_FLAGS[mode], name)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
    except OSError as exc:
        raise _refuse(exc, name) from exc
    return {"path": workspace_relative(call.workspace, path), "mode": mode, "bytes_written": len(data)}
