"""``shell.run``: one command, as an argv list, in the workspace (SPEC §5.1).

Never through a shell, and never straight from the server: every command is
started by a launcher (``tools/launcher.py``), a fresh interpreter
started with the same minimal environment as the command (``PATH``, ``LANG``,
``HOME`` = the workspace). Being a process of one thread, the launcher can
safely do between fork and exec what a threaded server cannot (enter the
sandbox below), and it outlives the command to clean up after it.

Keeping the server's secrets from the command. The server's environment holds
``SECRET_KEY`` and database passwords, and building the command's environment
from nothing is not enough: Linux lets any process read
``/proc/<pid>/environ`` of every other process of the same user, and every
pid is listed in ``/proc``. So a clean parent (the launcher) is not enough
either, and hiding the parent (a double fork, re-parenting to init) would
only hide one number. What holds is a check by the kernel on every such
read, and the launcher puts the command where that check says no:

- Landlock: the command runs in a Landlock domain, and the kernel refuses a
  process in a domain any ptrace-class access (``environ``, ``mem``,
  ``maps``, ptrace, ``process_vm_readv``) to a process outside it: the
  server, its workers, the shell or service manager that started them, any
  process of the user. Every descendant inherits the domain and none can
  leave it. Without Landlock (Linux before 5.13, or disabled), ``shell.run``
  refuses to run rather than run unprotected.
- Root: some capabilities get past that check (``CAP_SYS_PTRACE``; on Linux
  6.18 ``CAP_SYS_ADMIN`` and ``CAP_PERFMON`` too), so a server running as
  root starts its commands without them; the kernel then also refuses a
  process the environment of any process holding more capabilities than
  itself. A root command still reads every file and can reach the machine's
  memory in other ways: run Conductor as an unprivileged user.

What a command sees: a list, not a list of what is hidden. The same Landlock
domain handles reading, listing and running files, and grants them only
beneath the system's folders (``SYSTEM_FOLDERS``: ``/usr``, ``/etc``, ``/opt``,
...), the workspace and a temp folder of the command's own (``TMPDIR``: made
private for each command in the system's temp folder, removed after it).
Nothing else is seen: not the data folder around the workspace (the
databases ``conductor.sqlite3`` and ``channels.sqlite3`` and their journals,
the channel layer's doorbell registry, the secret key, the logs), whatever
is added to it later, nor ``/home``, ``/root``, ``/tmp`` or ``/run``. Where
the data folder, or a file holding the key (``CONDUCTOR_SECRET_FILES``: the
data folder's ``secret_key``, a ``.env``, the deploy kit's
``/etc/conductor.env``), lies inside a system folder, the grant goes around
it (``landlock.readable_rules``): no move or link between folders brings a
file out from under it.

Writing only in the workspace. The domain also handles every right that
changes the file system (writing a file, truncating it, making, removing,
renaming or linking an entry) and grants them only beneath the workspace and
the command's temp folder, and writing on the devices programs use
(``/dev/null``, ``/dev/tty``, the pseudo-terminals; ``landlock.WRITABLE_DEVICES``).
What fails says "Permission denied". Device nodes are made nowhere.

No network, by default. The launcher moves into a network namespace of its
own before it starts the command: the command has a loopback of its own and
nothing else, so it reaches neither the internet nor this machine's loopback
(the server's port, PostgreSQL, Redis). Unix sockets are reached by path,
past any network namespace, and Landlock does not check a socket's connect:
a socket filter refuses the command every socket but IP and netlink ones
(``isolation.enter_socket_filter``), so ``/run/postgresql``'s socket is out
of reach too. A tool policy may allow the network for ``shell.run``
(``ToolPolicy.allow_network``, e.g. for ``pip install``); the approval page
then says "this command may use the network".

Other processes out of sight. ``/proc`` lists every process of the machine,
and a process's command line (``/proc/<pid>/cmdline``, a secret passed as an
argument) is readable by any process of the same user, Landlock domain or
not. So the command starts in a PID namespace of its own and mounts a
``/proc`` of that namespace (and an empty ``/dev/shm``) over its own view
(``isolation.mount_own_proc_and_shm``): it sees itself and its children, and
is the namespace's first process, whose exit kills every process left in it.

Where the kernel refuses a part of this (Landlock, the namespaces: unprivileged
user namespaces disabled, a container's seccomp filter), ``shell.run`` refuses
to run the command, saying why, unless the operator set
``CONDUCTOR_SHELL_UNCONFINED=1``: then it runs with what the kernel gives,
and the server logs ``shell_unconfined`` once with what is missing;
``manage.py doctor`` and the server's start say which it is.

Ending the whole tree. The launcher is a child subreaper: an orphan below
it (``setsid``, a double fork) is re-parented to the launcher instead of
init, so when the command exits, times out or is cancelled, the launcher
kills and reaps every process left below it before it reports.
Then nothing holds the output pipes. The server never blocks on them: it
reads them with ``select`` and gives up at the deadline plus a short grace
even if something it cannot see still holds them. A server that dies takes
its commands with it: the launcher treats the closed status socket as a stop.
(A cgroup would do the same without a subreaper, but needs a delegated
cgroup a service user seldom has.)

Output beyond the cap is read and dropped, so a chatty command neither blocks
on a full pipe nor fills memory.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import selectors
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.logfmt import log_event
from tools.registry import ToolCall, ToolError
from tools.workspace import workspace_path, workspace_root

logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT_SECONDS = 30
OUTPUT_CAP_BYTES = 64 * 1024
SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"
LAUNCHER = Path(__file__).with_name("launcher.py")
# What a command may read besides its workspace and temp folder: the system's files. /proc is its own
# (a PID namespace's); of /dev, only the devices landlock.WRITABLE_DEVICES names and a /dev/shm of its own.
SYSTEM_FOLDERS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt", "/sys", "/proc")
# The setting that lets commands run where the kernel refuses a part of their sandbox.
UNCONFINED_SETTING = "CONDUCTOR_SHELL_UNCONFINED"
# How often the wait looks at the cancel flag.
POLL_SECONDS = 0.1
# How long the launcher may take to kill and reap the tree once asked to stop.
STOP_GRACE_SECONDS = 5.0
# After the launcher reported, how long the pipes may take to reach their end.
# Everything below the launcher is dead by then; only a pipe handed to a
# process outside the tree (over a socket, say) could keep them open.
DRAIN_SECONDS = 2.0
READ_CHUNK = 65536


def shell_environment(call: ToolCall, *, temp: Path | None = None) -> dict[str, str]:
    """A command's whole environment: ``PATH``, ``LANG``, ``HOME`` (the workspace), and ``TMPDIR``, its own ``temp``."""
    environment = {"PATH": SAFE_PATH, "LANG": "C.UTF-8", "HOME": str(workspace_root(call.workspace))}
    if temp is not None:
        environment["TMPDIR"] = str(temp)
    return environment


@contextlib.contextmanager
def own_temp_folder(prefix: str) -> Iterator[Path]:
    """A new private (0700) folder in the system's temp folder, for one command (its ``TMPDIR``), removed after it."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


class _CappedOutput:
    """The first ``cap`` bytes of a stream, and how many there were in all."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.kept = bytearray()
        self.total = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        self.kept += chunk[: max(0, self.cap - len(self.kept))]

    def text(self) -> str:
        return self.kept.decode("utf-8", errors="replace")

    @property
    def is_truncated(self) -> bool:
        return self.total > len(self.kept)


def _start_launcher(argv: list[str], cwd: Path, env: dict[str, str], status_fd: int, options: list[str]) -> subprocess.Popen:
    if sys.platform != "linux":
        raise ToolError(f"shell.run needs Linux (its sandbox uses prctl and Landlock); this is {sys.platform}")
    if not sys.executable:
        raise ToolError("shell.run cannot find the Python interpreter to start its launcher")
    try:
        return subprocess.Popen(
            # -I -S: the launcher sees neither PYTHON* variables nor site-packages.
            [
                sys.executable, "-I", "-S", str(LAUNCHER), str(status_fd), *options, "--", *argv,
            ],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=(status_fd,),
            # Out of the server's process group: a Ctrl-C meant for the
            # server reaches the launcher as a closed socket, after the
            # server has had its say.
            start_new_session=True,
        )
    except ValueError as exc:  # a NUL byte in an argument
        raise ToolError(f"argv cannot be passed to a command: {exc}") from exc
    except OSError as exc:
        raise ToolError(f"could not start the launcher: {exc.strerror or exc}") from exc


def launcher_options(
    *, readable: Iterable[Path | str], hidden: Iterable[Path | str] = (),
    writable: Iterable[Path | str] = (), network: bool = False, unconfined: bool = False,
) -> list[str]:
    """The launcher's options: what a command may read, may never read, may write in; whether it
    has the network, and whether it runs where the kernel refuses a part of its sandbox."""
    return [
        *(part for path in readable for part in ("--read", str(path))),
        *(part for path in hidden for part in ("--hide", str(path))),
        *(part for path in writable for part in ("--write", str(path))),
        *(["--network"] if network else []),
        *(["--unconfined"] if unconfined else []),
    ]


def command_options(call: ToolCall, *, temp: Path) -> list[str]:
    """``launcher_options`` for a ``shell.run`` command: the system's folders, its workspace and temp folder."""
    return launcher_options(
        readable=SYSTEM_FOLDERS, hidden=(*call.private_folders, *call.secret_files),
        writable=(workspace_root(call.workspace), temp), network=call.allow_network, unconfined=call.unconfined,
    )


# The launcher's start-up error codes (automation/tools/launcher.py) and what they mean.
_START_ERRORS = {
    "not_found": "command not found: {command!r} (PATH is {path})",
    "not_executable": "command not executable: {command!r}",
    "sandbox": "shell.run cannot confine commands on this machine: {detail} "
               f"(an operator may set {UNCONFINED_SETTING}=1 to run them unconfined)",
}
_START_ERROR_OTHER = "could not start {command!r}: {detail}"


def _start_error(report: dict[str, Any], argv: list[str]) -> ToolError:
    template = _START_ERRORS.get(report["error"], _START_ERROR_OTHER)
    return ToolError(template.format(command=argv[0], path=SAFE_PATH, detail=report.get("detail", "")))


@dataclass
class _Watched:
    """What one launcher gave back: its report (empty when it died without one) and the command's output."""

    report: dict[str, Any]
    stdout: _CappedOutput
    stderr: _CappedOutput
    timed_out: bool
    cancelled: bool


def _watch(launcher: subprocess.Popen, status: socket.socket, *, deadline: float, call: ToolCall) -> _Watched:
    """Read the command's output and the launcher's report until both end, without ever blocking on them.

    At the deadline or on a cancel, asks the launcher to stop by shutting
    down the server's half of the status socket; the launcher then kills the
    tree and reports. A launcher that does not report within
    ``STOP_GRACE_SECONDS`` is killed; pipes still open ``DRAIN_SECONDS``
    after the report are left.
    """
    outputs = {pipe.fileno(): _CappedOutput(OUTPUT_CAP_BYTES) for pipe in (launcher.stdout, launcher.stderr)}
    report = bytearray()
    timed_out = cancelled = False
    stop_asked_at = reported_at = None
    with selectors.DefaultSelector() as selector:
        for fd in outputs:
            os.set_blocking(fd, False)
            selector.register(fd, selectors.EVENT_READ)
        status.setblocking(False)
        selector.register(status.fileno(), selectors.EVENT_READ)

        while selector.get_map():
            now = time.monotonic()
            if stop_asked_at is None and reported_at is None and (call.cancelled.is_set() or now >= deadline):
                cancelled = call.cancelled.is_set()
                timed_out = not cancelled
                status.shutdown(socket.SHUT_WR)
                stop_asked_at = now
            if reported_at is None and stop_asked_at is not None and now - stop_asked_at > STOP_GRACE_SECONDS:
                log_event(logger, "shell_launcher_stuck", level=logging.WARNING, pid=launcher.pid)
                launcher.kill()
                break
            if reported_at is not None and now - reported_at > DRAIN_SECONDS:
                log_event(logger, "shell_pipes_held", level=logging.WARNING, pid=launcher.pid)
                break
            wait = POLL_SECONDS if stop_asked_at is not None else min(POLL_SECONDS, max(0.0, deadline - now))
            for key, _ in selector.select(wait):
                if key.fd == status.fileno():
                    try:
                        chunk = status.recv(READ_CHUNK)
                    except OSError:
                        chunk = b""  # the launcher is gone; what it said is all there is
                    report += chunk
                else:
                    chunk = os.read(key.fd, READ_CHUNK)
                    outputs[key.fd].add(chunk)
                if not chunk:
                    selector.unregister(key.fd)
                    if key.fd == status.fileno():
                        reported_at = time.monotonic()

    stdout, stderr = outputs.values()
    parsed = json.loads(report) if report.strip() else {}
    return _Watched(parsed, stdout, stderr, timed_out=timed_out, cancelled=cancelled)


_unconfined_said = False


def _unconfined(reason: str) -> None:
    """Say once per process that commands here run without a part of their sandbox, and which."""
    global _unconfined_said
    if not _unconfined_said:
        _unconfined_said = True
        log_event(logger, "shell_unconfined", level=logging.WARNING, reason=reason, setting=UNCONFINED_SETTING)


def _resolve(call: ToolCall) -> tuple[Path, float]:
    """The folder the command runs in and its timeout in seconds, as ``shell_run`` uses them."""
    cwd_name = call.params.get("cwd", ".")
    timeout = min(float(call.params.get("timeout_s", DEFAULT_TIMEOUT_SECONDS)), call.shell_max_timeout_seconds)
    cwd = workspace_path(call.workspace, cwd_name)
    if not cwd.is_dir():
        raise ToolError(f"cwd {cwd_name!r} is not a folder in the workspace")
    return cwd, timeout


# What the approval page says of a command's network (SPEC §5.1).
NETWORK_ALLOWED = "this command may use the network (a tool policy allows it): the internet and this machine's loopback"
NETWORK_NONE = "none: it reaches neither the internet nor this machine's loopback"


def shell_plan(call: ToolCall) -> dict[str, Any]:
    """What ``shell_run`` would run: the argv, the real folder it runs in, the timeout it gets, its network."""
    cwd, timeout = _resolve(call)
    return {
        "argv": call.params["argv"], "working folder": str(cwd), "timeout": f"{timeout:g} s",
        "network": NETWORK_ALLOWED if call.allow_network else NETWORK_NONE,
    }


def shell_run_trial(
    *, workspace: Path, argv: tuple[str, ...] = ("true",), private_folders: tuple[Path, ...] = (),
    unconfined: bool = False,
) -> dict[str, Any]:
    """Run ``argv`` as a ``shell.run`` block would, in ``workspace``: proof that commands run here.

    Returns the block's result, with ``"unconfined"``: what of the sandbox
    the kernel refused ("" when none; with ``unconfined`` the command runs
    without it). Raises ``ToolError`` with the reason a block would get.
    """
    call = ToolCall(
        params={"argv": list(argv)}, workspace=workspace, shell_max_timeout_seconds=10,
        private_folders=private_folders, unconfined=unconfined,
    )
    result, report = _shell_run(call)
    return {**result, "unconfined": report.get("unconfined", "")}


def shell_run(call: ToolCall) -> dict[str, Any]:
    """Run ``argv`` in ``cwd`` for at most ``timeout_s`` seconds (capped by the server's maximum).

    Returns exit code, capped stdout and stderr, duration and whether it timed
    out. A non-zero exit or a timeout is a ``ToolError`` carrying that same
    result, so the chat sees the output next to the error. However it ends,
    no process the command started is left running, and the call returns
    within ``STOP_GRACE_SECONDS + DRAIN_SECONDS`` of the timeout or the cancel.
    """
    return _shell_run(call)[0]


def _shell_run(call: ToolCall) -> tuple[dict[str, Any], dict[str, Any]]:
    """``shell_run``'s work: the block's result and the launcher's report."""
    argv, cwd_name = call.params["argv"], call.params.get("cwd", ".")
    cwd, timeout = _resolve(call)

    started = time.monotonic()
    with own_temp_folder("conductor-shell-") as temp:
        status, launcher_end = socket.socketpair()
        try:
            launcher = _start_launcher(
                argv, cwd, shell_environment(call, temp=temp), launcher_end.fileno(), command_options(call, temp=temp)
            )
        except BaseException:
            status.close()
            raise
        finally:
            launcher_end.close()
        try:
            watched = _watch(launcher, status, deadline=started + timeout, call=call)
        finally:
            # On any way out, a closed socket tells the launcher to end the tree.
            status.close()
            try:
                launcher.wait(STOP_GRACE_SECONDS)
            except subprocess.TimeoutExpired:
                launcher.kill()
                launcher.wait()
            launcher.stdout.close()
            launcher.stderr.close()

    if "error" in watched.report:
        raise _start_error(watched.report, argv)
    if "unconfined" in watched.report:
        _unconfined(watched.report["unconfined"])
    result = {
        "argv": argv,
        "cwd": cwd_name,
        "exit_code": watched.report.get("exit_code"),
        "stdout": watched.stdout.text(),
        "stderr": watched.stderr.text(),
        "stdout_truncated": watched.stdout.is_truncated,
        "stderr_truncated": watched.stderr.is_truncated,
        "duration_ms": round((time.monotonic() - started) * 1000),
        "timed_out": watched.timed_out,
    }
    if watched.cancelled:
        raise ToolError("cancelled; the command was killed", result=result)
    if watched.timed_out:
        raise ToolError(f"timed out after {timeout:g} s; the command and its children were killed", result=result)
    if "exit_code" not in watched.report:
        raise ToolError(f"the command's launcher ended without a report (status {launcher.returncode})", result=result)
    if result["exit_code"] != 0:
        raise ToolError(f"exited with code {result['exit_code']}", result=result)
    return result, watched.report
