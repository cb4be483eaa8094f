"""``shell.run``: one command, as an argv list, in the workspace (SPEC §5.1).

Never through a shell. The command starts in a new session, so it and every
child it forks share one process group: a timeout or a cancel kills the whole
group. Its environment is built from nothing (``PATH``, ``LANG``, ``HOME`` =
the workspace): the server's own holds ``SECRET_KEY`` and database
passwords. Output beyond the cap is read and dropped, so a chatty command
neither blocks on a full pipe nor fills memory.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from typing import IO, Any

from automation.tools.registry import ToolCall, ToolError
from automation.tools.workspace import workspace_path, workspace_root

DEFAULT_TIMEOUT_SECONDS = 30
OUTPUT_CAP_BYTES = 64 * 1024
SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"
# How often the wait looks at the cancel flag.
POLL_SECONDS = 0.1
# After the group is killed, how long the readers may take to drain the pipes.
# A process that left the group (setsid) may hold them open forever.
DRAIN_SECONDS = 2.0


def shell_environment(call: ToolCall) -> dict[str, str]:
    return {"PATH": SAFE_PATH, "LANG": "C.UTF-8", "HOME": str(workspace_root(call.workspace))}


class _CappedReader(threading.Thread):
    """Reads a pipe to its end, keeping the first ``cap`` bytes."""

    def __init__(self, stream: IO[bytes], cap: int) -> None:
        super().__init__(daemon=True)
        self.stream, self.cap = stream, cap
        self.kept = bytearray()
        self.total = 0

    def run(self) -> None:
        try:
            while chunk := self.stream.read1(65536):
                self.total += len(chunk)
                room = self.cap - len(self.kept)
                if room > 0:
                    self.kept += chunk[:room]
        except (OSError, ValueError):
            pass  # closed under us after the drain timeout

    def text(self) -> str:
        return self.kept.decode("utf-8", errors="replace")

    @property
    def is_truncated(self) -> bool:
        return self.total > len(self.kept)


def _kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def shell_run(call: ToolCall) -> dict[str, Any]:
    """Run ``argv`` in ``cwd`` for at most ``timeout_s`` seconds (capped by the server's maximum).

    Returns exit code, capped stdout and stderr, duration and whether it timed
    out. A non-zero exit or a timeout is a ``ToolError`` carrying that same
    result, so the chat sees the output next to the error.
    """
    argv = call.params["argv"]
    cwd_name = call.params.get("cwd", ".")
    timeout = min(float(call.params.get("timeout_s", DEFAULT_TIMEOUT_SECONDS)), call.shell_max_timeout_seconds)
    cwd = workspace_path(call.workspace, cwd_name)
    if not cwd.is_dir():
        raise ToolError(f"cwd {cwd_name!r} is not a folder in the workspace")

    started = time.monotonic()
    try:
        process = subprocess.Popen(
            argv,
            cwd=cwd,
            env=shell_environment(call),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            close_fds=True,
        )
    except FileNotFoundError as exc:
        raise ToolError(f"command not found: {argv[0]!r} (PATH is {SAFE_PATH})") from exc
    except PermissionError as exc:
        raise ToolError(f"command not executable: {argv[0]!r}") from exc
    except OSError as exc:
        raise ToolError(f"could not start {argv[0]!r}: {exc.strerror or exc}") from exc

    readers = [_CappedReader(process.stdout, OUTPUT_CAP_BYTES), _CappedReader(process.stderr, OUTPUT_CAP_BYTES)]
    for reader in readers:
        reader.start()
    timed_out = cancelled = False
    try:
        deadline = started + timeout
        while process.poll() is None:
            if call.cancelled.is_set():
                cancelled = True
                break
            if time.monotonic() >= deadline:
                timed_out = True
                break
            try:
                process.wait(min(POLL_SECONDS, max(0.0, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                pass
    finally:
        # The leader may have exited and left children behind: end the group either way.
        _kill_group(process)
        process.wait()
        for reader in readers:
            reader.join(DRAIN_SECONDS)
        process.stdout.close()
        process.stderr.close()

    stdout, stderr = readers
    result = {
        "argv": argv,
        "cwd": cwd_name,
        "exit_code": process.returncode,
        "stdout": stdout.text(),
        "stderr": stderr.text(),
        "stdout_truncated": stdout.is_truncated,
        "stderr_truncated": stderr.is_truncated,
        "duration_ms": round((time.monotonic() - started) * 1000),
        "timed_out": timed_out,
    }
    if cancelled:
        raise ToolError("cancelled; the command was killed", result=result)
    if timed_out:
        raise ToolError(f"timed out after {timeout:g} s; the command and its children were killed", result=result)
    if process.returncode != 0:
        raise ToolError(f"exited with code {process.returncode}", result=result)
    return result
