"""The tools of SPEC §5.1: success and failure paths, the workspace sandbox, shell.run's limits."""

import datetime as dt
import hashlib
import json
import os
import secrets
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from automation.models import TaskStatus
from tests.factories import make_task
from tests.server import is_alive
from tools import files as files_module
from tools import landlock, launcher, shell
from tools.registry import ToolCall, ToolError, tools

PROJECT_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def workspace(tmp_path):
    root = tmp_path / "workspace"
    root.mkdir()
    return root


@pytest.fixture
def outside(tmp_path):
    secret = tmp_path / "outside" / "secret.txt"
    secret.parent.mkdir()
    secret.write_text("top secret")
    return secret


def run(workspace: Path, tool: str, params: dict, *, max_timeout: float = 300, cancelled=None):
    spec = tools.get(tool)
    assert spec.params_error(params) is None, spec.params_error(params)
    call = ToolCall(
        params=params, workspace=workspace, shell_max_timeout_seconds=max_timeout,
        cancelled=cancelled or threading.Event(),
    )
    return spec.run(call)


def refused(workspace: Path, tool: str, params: dict, **kwargs) -> ToolError:
    with pytest.raises(ToolError) as caught:
        run(workspace, tool, params, **kwargs)
    return caught.value


def finishes_within(seconds: float, function, *args, **kwargs):
    """``function``'s return value, or the exception it raised; fails the test when it is still running after ``seconds``.

    It runs in a thread, so a call that blocks forever fails the test instead of hanging it.
    """
    outcome = {}

    def target():
        try:
            outcome["value"] = function(*args, **kwargs)
        except BaseException as exc:  # handed back to the test below
            outcome["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        pytest.fail(f"still running after {seconds} s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def test_every_registered_tool_has_an_implementation():
    assert [spec.name for spec in tools if spec.run is None] == []


# --- echo, time.now, tasks.status --------------------------------------------------------------


def test_echo_returns_its_params(workspace):
    params = {"a": [1, {"b": None}], "text": "héllo"}
    assert run(workspace, "echo", params) == params


def test_time_now_is_iso_8601_utc(workspace):
    result = run(workspace, "time.now", {})
    parsed = dt.datetime.fromisoformat(result["now"])
    assert result["now"].endswith("Z")
    assert abs((dt.datetime.now(dt.UTC) - parsed).total_seconds()) < 60


@pytest.mark.django_db
def test_tasks_status_counts_tasks_by_kind_and_status(workspace):
    make_task(TaskStatus.PENDING)
    make_task(TaskStatus.PENDING)
    make_task(TaskStatus.FAILED, kind="test.local")
    assert run(workspace, "tasks.status", {}) == {
        "tasks": {"test.instruction": {"pending": 2}, "test.local": {"failed": 1}},
        "total": 3,
    }


# --- files.write ----------------------------------------------------------------------------


def test_write_creates_a_file_and_its_folders(workspace):
    result = run(workspace, "files.write", {"path": "notes/day/todo.md", "content": "é\n"})
    assert result == {"path": "notes/day/todo.md", "mode": "create", "bytes_written": 3}
    assert (workspace / "notes/day/todo.md").read_text() == "é\n"


def test_write_in_create_mode_refuses_an_existing_file(workspace):
    (workspace / "a.txt").write_text("keep")
    error = refused(workspace, "files.write", {"path": "a.txt", "content": "x"})
    assert "a.txt: already exists" in str(error)
    assert (workspace / "a.txt").read_text() == "keep"


@pytest.mark.parametrize("mode,expected", [("overwrite", "new"), ("append", "oldnew")])
def test_write_overwrites_or_appends(workspace, mode, expected):
    (workspace / "a.txt").write_text("old")
    assert run(workspace, "files.write", {"path": "a.txt", "content": "new", "mode": mode})["bytes_written"] == 3
    assert (workspace / "a.txt").read_text() == expected


def test_write_onto_a_folder_is_an_error(workspace):
    (workspace / "folder").mkdir()
    assert "folder: is a folder" in str(refused(workspace, "files.write", {
        "path": "folder", "content": "x", "mode": "overwrite",
    }))


# --- files.read -----------------------------------------------------------------------------


def test_read_returns_text_size_and_no_truncation(workspace):
    (workspace / "a.md").write_text("# Todo\n- ship\n")
    assert run(workspace, "files.read", {"path": "a.md"}) == {
        "path": "a.md", "text": "# Todo\n- ship\n", "size": 14, "truncated": False,
    }


def test_read_stops_at_max_bytes_without_splitting_a_character(workspace):
    (workspace / "a.txt").write_bytes("abé€z".encode())  # é is 2 bytes, € is 3
    result = run(workspace, "files.read", {"path": "a.txt", "max_bytes": 5})
    assert result == {"path": "a.txt", "text": "abé", "size": 8, "truncated": True}


def test_read_replaces_bad_bytes(workspace):
    (workspace / "bin").write_bytes(b"ok\xff\xfeend")
    assert run(workspace, "files.read", {"path": "bin"})["text"] == "ok\ufffd\ufffdend"


def test_read_describes_a_binary_file_instead_of_escaping_its_bytes(workspace):
    data = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR" + bytes(range(256)) * 400
    (workspace / "logo.png").write_bytes(data)
    assert run(workspace, "files.read", {"path": "logo.png", "max_bytes": 16}) == {
        "path": "logo.png", "binary": True, "size": len(data), "type": "image/png",
        # Of the whole file, not only of the bytes read.
        "sha256": hashlib.sha256(data).hexdigest(),
    }


@pytest.mark.parametrize("data,is_binary", [
    (b"plain text\n" * 100, False),
    ("caf\u00e9 \u20ac \U0001f600\n".encode() * 100, False),
    ("Le caf\u00e9 est tr\u00e8s bon.\n".encode("latin-1") * 100, False),  # some bad bytes: still text
    (b"ok\xff\xfeend", False),
    (b"col1\tcol2\r\n\x1b[1mbold\x1b[0m\n" * 50, False),
    (b"text with one NUL\0 byte", True),
    (bytes(range(1, 256)) * 10, True),  # controls and undecodable bytes
    (b"\x01\x02\x03\x04" * 100, True),  # valid UTF-8, but controls: six bytes each as JSON
    (b"\xff" * 100, True),
])
def test_read_tells_binary_from_text(workspace, data, is_binary):
    (workspace / "f").write_bytes(data)
    assert run(workspace, "files.read", {"path": "f"}).get("binary", False) is is_binary


def test_read_max_bytes_is_bounded_so_a_stored_result_fits_the_cap(workspace):
    spec = tools.get("files.read")
    assert spec.params_error({"path": "a", "max_bytes": files_module.MAX_READ_BYTES}) is None
    assert "is greater than the maximum" in spec.params_error(
        {"path": "a", "max_bytes": files_module.MAX_READ_BYTES + 1}
    )
    # The worst text: a quarter of it undecodable (six bytes each as JSON), the
    # rest four-byte characters (twelve bytes each as JSON).
    worst = ("\U0001f600" * 3).encode() + b"\xff" * 4
    worst *= files_module.MAX_READ_BYTES // len(worst)
    (workspace / "worst.txt").write_bytes(worst)
    result = run(workspace, "files.read", {"path": "worst.txt", "max_bytes": files_module.MAX_READ_BYTES})
    assert "text" in result
    assert len(json.dumps(result)) <= 1024 * 1024


@pytest.mark.parametrize("name,setup,message", [
    ("missing.txt", lambda ws: None, "missing.txt: no such file or folder"),
    ("folder", lambda ws: (ws / "folder").mkdir(), "folder: is a folder"),
])
def test_read_failures_name_the_path(workspace, name, setup, message):
    setup(workspace)
    assert message in str(refused(workspace, "files.read", {"path": name}))


def test_read_follows_a_symlink_that_stays_inside(workspace):
    (workspace / "real.txt").write_text("inside")
    (workspace / "link.txt").symlink_to("real.txt")
    assert run(workspace, "files.read", {"path": "link.txt"})["text"] == "inside"


# --- files.read and files.write on what is not a regular file --------------------------------


def make_fifo(workspace: Path) -> Path:
    path = workspace / "pipe"
    os.mkfifo(path)
    return path


def release_fifo(path: Path) -> None:
    """Let go of a tool stuck opening ``path``: an end that both reads and writes opens at once and serves either."""
    os.close(os.open(path, os.O_RDWR | os.O_NONBLOCK))


def make_socket(workspace: Path) -> Path:
    # What a server leaves behind: the socket's file (mknod: no limit on the path's length).
    path = workspace / "sock"
    os.mknod(path, stat.S_IFSOCK | 0o600)
    return path


def make_device(workspace: Path) -> Path:
    path = workspace / "null"
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, os.stat("/dev/null").st_rdev)
    except PermissionError:
        pytest.skip("making a device node needs CAP_MKNOD")
    return path


NOT_REGULAR = {
    "FIFO": (make_fifo, "is a FIFO, not a regular file"),
    "socket": (make_socket, "is a socket, not a regular file"),
    "device": (make_device, "is a character device, not a regular file"),
}
TOOLS_ON_A_PATH = {
    "read": ("files.read", {}),
    "overwrite": ("files.write", {"content": "x", "mode": "overwrite"}),
    "append": ("files.write", {"content": "x", "mode": "append"}),
}


@pytest.mark.parametrize("use", TOOLS_ON_A_PATH)
@pytest.mark.parametrize("kind", NOT_REGULAR)
def test_only_regular_files_are_read_or_written(workspace, kind, use):
    make, message = NOT_REGULAR[kind]
    path = make(workspace)
    tool, params = TOOLS_ON_A_PATH[use]
    started = time.monotonic()
    try:
        error = finishes_within(5, refused, workspace, tool, {"path": path.name, **params})
    finally:
        if kind == "FIFO":
            release_fifo(path)
    assert str(error) == f"{path.name}: {message}"
    assert time.monotonic() - started < 1


@pytest.mark.parametrize("use,message", [
    # Opened without blocking: a read end opens at once and shows what it is.
    ("read", "swap: is a FIFO, not a regular file"),
    # A write end without a reader does not open at all.
    ("overwrite", "swap: is not a regular file"),
])
def test_a_fifo_swapped_in_after_the_look_does_not_block_the_open(workspace, monkeypatch, use, message):
    target = workspace / "swap"
    target.write_text("regular at first")
    real_open = files_module._open

    def swap_then_open(path, flags, name):
        target.unlink()
        os.mkfifo(target)
        return real_open(path, flags, name)

    monkeypatch.setattr(files_module, "_open", swap_then_open)
    tool, params = TOOLS_ON_A_PATH[use]
    try:
        error = finishes_within(5, refused, workspace, tool, {"path": "swap", **params})
    finally:
        release_fifo(target)
    assert str(error) == message


# --- files.list -----------------------------------------------------------------------------


def test_list_shows_entries_with_type_and_size(workspace, outside):
    (workspace / "b.txt").write_text("12345")
    (workspace / "a").mkdir()
    (workspace / "a" / "deep.py").write_text("x")
    (workspace / "out").symlink_to(outside.parent)
    assert run(workspace, "files.list", {}) == {
        "path": ".",
        "entries": [
            {"name": "a", "type": "dir", "size": None},
            {"name": "b.txt", "type": "file", "size": 5},
            {"name": "out", "type": "symlink", "size": len(str(outside.parent))},
        ],
        "truncated": False,
    }


def test_list_matches_a_glob_and_walks_with_double_star(workspace, outside):
    (workspace / "src" / "pkg").mkdir(parents=True)
    for name in ("src/a.py", "src/pkg/b.py", "src/c.txt"):
        (workspace / name).write_text("x")
    # A symlinked folder is listed but never walked into.
    (workspace / "src" / "out").symlink_to(outside.parent)

    def names(result):
        return [entry["name"] for entry in result["entries"]]

    assert names(run(workspace, "files.list", {"path": "src", "glob": "*.py"})) == ["a.py"]
    assert names(run(workspace, "files.list", {"path": "src", "glob": "**/*.py"})) == ["pkg/b.py"]
    assert names(run(workspace, "files.list", {"path": "src", "glob": "**"})) == [
        "a.py", "c.txt", "out", "pkg", "pkg/b.py",
    ]


def test_list_reports_a_name_that_is_not_utf8_escaped_and_flagged(workspace):
    root = os.fsencode(workspace)
    os.mkdir(root + b"/dir-\xe9")
    with open(root + b"/dir-\xe9/bad-\xffx", "wb") as handle:
        handle.write(b"1")
    (workspace / "caf\u00e9-\\xff").write_text("")  # a valid name that merely looks escaped
    result = run(workspace, "files.list", {"glob": "**"})
    assert result["entries"] == [
        {"name": "caf\u00e9-\\xff", "type": "file", "size": 0},
        {"name": "dir-\\xe9", "type": "dir", "size": None, "escaped": True},
        {"name": "dir-\\xe9/bad-\\xffx", "type": "file", "size": 1, "escaped": True},
    ]
    # The result is valid UTF-8 JSON: no lone surrogate reached it.
    json.dumps(result, ensure_ascii=False).encode("utf-8")


def test_list_is_capped(workspace, monkeypatch):
    monkeypatch.setattr(files_module, "MAX_LIST_ENTRIES", 3)
    for n in range(5):
        (workspace / f"{n}.txt").write_text("")
    result = run(workspace, "files.list", {})
    assert [entry["name"] for entry in result["entries"]] == ["0.txt", "1.txt", "2.txt"]
    assert result["truncated"] is True


def test_list_of_a_file_is_an_error(workspace):
    (workspace / "f").write_text("")
    assert "f: is not a folder" in str(refused(workspace, "files.list", {"path": "f"}))


def test_a_missing_workspace_is_created(tmp_path):
    assert run(tmp_path / "new-workspace", "files.list", {})["entries"] == []


# --- every way out of the workspace ---------------------------------------------------------

ESCAPES = {
    "dot-dot": ("../outside/secret.txt", "leads outside the workspace"),
    "dot-dot in the middle": ("notes/../../outside/secret.txt", "leads outside the workspace"),
    "absolute": ("/etc/passwd", "is absolute"),
    "symlinked file": ("secret-link", "leads outside the workspace"),
    "through a symlinked folder": ("out-folder/secret.txt", "leads outside the workspace"),
    "NUL byte": ("a\x00b", "contains a NUL byte"),
    "symlink to a device": ("null-link", "leads outside the workspace"),
}


@pytest.fixture
def escape_routes(workspace, outside):
    (workspace / "notes").mkdir()
    (workspace / "secret-link").symlink_to(outside)
    (workspace / "out-folder").symlink_to(outside.parent)
    (workspace / "null-link").symlink_to("/dev/null")
    return workspace


@pytest.mark.parametrize("route", ESCAPES)
@pytest.mark.parametrize("tool,params", [
    ("files.read", lambda path: {"path": path}),
    ("files.write", lambda path: {"path": path, "content": "pwned", "mode": "overwrite"}),
    ("files.list", lambda path: {"path": path}),
    ("shell.run", lambda path: {"argv": ["ls"], "cwd": path}),
])
def test_every_way_out_of_the_workspace_is_refused(escape_routes, outside, route, tool, params):
    path, message = ESCAPES[route]
    error = refused(escape_routes, tool, params(path))
    assert message in str(error)
    assert outside.read_text() == "top secret"


def test_a_symlink_swapped_in_after_the_check_is_not_followed(workspace, outside, monkeypatch):
    # The check sees a plain path; by the open, it is a link pointing out.
    target = workspace / "swap.txt"
    real_open = files_module._open

    def swap_then_open(path, flags, name):
        target.symlink_to(outside)
        return real_open(path, flags, name)

    monkeypatch.setattr(files_module, "_open", swap_then_open)
    error = refused(workspace, "files.write", {"path": "swap.txt", "content": "pwned", "mode": "overwrite"})
    assert "is a symlink" in str(error)
    assert outside.read_text() == "top secret"


# --- shell.run ------------------------------------------------------------------------------


def test_shell_runs_an_argv_without_a_shell(workspace):
    (workspace / "sub").mkdir()
    result = run(workspace, "shell.run", {"argv": ["sh", "-c", "pwd; echo oops >&2"], "cwd": "sub"})
    assert result["exit_code"] == 0
    assert result["stdout"] == f"{(workspace / 'sub').resolve()}\n"
    assert result["stderr"] == "oops\n"
    assert result["timed_out"] is False
    # No shell: metacharacters are plain arguments, and nothing they would run runs.
    argv = ["echo", "$HOME", ";", "touch", "semi", "$(touch dollar)", "|", "touch", "pipe", "`touch tick`", "&&", ">", "out"]
    assert run(workspace, "shell.run", {"argv": argv})["stdout"] == " ".join(argv[1:]) + "\n"
    assert sorted(path.name for path in workspace.iterdir()) == ["sub"]


def test_a_non_zero_exit_is_a_failure_that_keeps_the_output(workspace):
    error = refused(workspace, "shell.run", {"argv": ["sh", "-c", "echo partial; exit 3"]})
    assert str(error) == "exited with code 3"
    assert error.result["exit_code"] == 3
    assert error.result["stdout"] == "partial\n"


def test_an_unknown_command_is_a_clear_error(workspace):
    assert "command not found: 'no-such-command'" in str(
        refused(workspace, "shell.run", {"argv": ["no-such-command"]})
    )


def test_a_missing_cwd_is_refused(workspace):
    assert "is not a folder" in str(refused(workspace, "shell.run", {"argv": ["ls"], "cwd": "nope"}))


def test_the_environment_is_minimal_and_holds_no_server_secret(workspace, monkeypatch, settings):
    monkeypatch.setenv("SECRET_KEY", "server-secret-value")
    monkeypatch.setenv("DATABASE_URL", "postgres://conductor:db-password@db/conductor")
    monkeypatch.setenv("CONDUCTOR_TEST_SECRET", "conductor-test-secret-value")
    printed = refused(workspace, "shell.run", {"argv": ["printenv", "CONDUCTOR_TEST_SECRET"]})
    assert str(printed) == "exited with code 1" and printed.result["stdout"] == ""
    result = run(workspace, "shell.run", {"argv": ["env"]})
    lines = sorted(result["stdout"].splitlines())
    temp = next(line for line in lines if line.startswith("TMPDIR="))
    assert lines == sorted([
        "HOME=" + str(workspace.resolve()), "LANG=C.UTF-8", "PATH=/usr/local/bin:/usr/bin:/bin", temp,
    ])
    for secret in ("server-secret-value", "db-password", "conductor-test-secret-value", settings.SECRET_KEY):
        assert secret not in result["stdout"]


def test_a_command_that_outlives_its_timeout_is_killed_with_its_children(workspace, marker):
    # The command's pids are its own namespace's: the child is found by its argument.
    argv = ["sh", "-c", f"sleep {marker} & echo started; sleep 60"]
    started = time.monotonic()
    error = refused(workspace, "shell.run", {"argv": argv, "timeout_s": 0.5})
    assert time.monotonic() - started < 10
    assert str(error).startswith("timed out after 0.5 s")
    assert error.result["timed_out"] is True
    assert error.result["stdout"] == "started\n"
    deadline = time.monotonic() + 5
    while pids_with_argument(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pids_with_argument(marker) == []


def test_the_timeout_is_capped_by_the_servers_maximum(workspace):
    error = refused(workspace, "shell.run", {"argv": ["sleep", "60"], "timeout_s": 3600}, max_timeout=0.3)
    assert str(error).startswith("timed out after 0.3 s")


def test_output_is_capped_and_the_rest_drained(workspace):
    result = run(workspace, "shell.run", {"argv": ["head", "-c", "300000", "/dev/zero"]})
    assert len(result["stdout"]) == 64 * 1024
    assert result["stdout_truncated"] is True
    assert result["stderr_truncated"] is False


def test_a_cancelled_task_stops_its_command(workspace):
    cancelled = threading.Event()
    threading.Timer(0.3, cancelled.set).start()
    started = time.monotonic()
    error = refused(workspace, "shell.run", {"argv": ["sleep", "60"]}, cancelled=cancelled)
    assert str(error) == "cancelled; the command was killed"
    assert time.monotonic() - started < 10


# --- shell.run: no process left behind -------------------------------------------------------


@pytest.fixture
def marker():
    """A ``sleep`` argument no other process has, to find the processes a test started.

    Any still running at the end are killed, so a failing test leaves nothing behind.
    """
    token = f"1002.{secrets.randbelow(10**9):09d}"
    yield token
    for pid in pids_with_argument(token):
        os.kill(pid, signal.SIGKILL)


def pids_with_argument(argument: str) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                if argument.encode() in cmdline.read().split(b"\0"):
                    pids.append(int(entry))
        except (OSError, ValueError):
            pass
    return [pid for pid in pids if is_alive(pid)]


DETACHING = {
    "a child in a session of its own": "setsid sleep {marker} &",
    "an orphan whose parent exited (double fork)": "sh -c 'setsid sleep {marker} &'",
    "a child that ignores hangups and closed its output": "nohup setsid sleep {marker} >/dev/null 2>&1 &",
}


@pytest.mark.parametrize("detach", DETACHING)
def test_children_are_killed_at_the_timeout_however_they_detached(workspace, marker, detach):
    argv = ["sh", "-c", DETACHING[detach].format(marker=marker) + "\necho started; sleep 60"]
    started = time.monotonic()
    error = finishes_within(15, refused, workspace, "shell.run", {"argv": argv, "timeout_s": 1})
    assert str(error).startswith("timed out after 1 s")
    assert error.result["stdout"] == "started\n"
    assert time.monotonic() - started < 5
    assert pids_with_argument(marker) == []


def test_a_command_that_exits_while_a_detached_child_holds_its_output_returns_at_once(workspace, marker):
    # The child keeps the stdout pipe open; the call must not wait for it. The
    # command exits only once the child has left its session (the pid file).
    detach = f"setsid sh -c 'echo $$ > detached.pid; exec sleep {marker}' &"
    argv = ["sh", "-c", detach + "\nwhile [ ! -s detached.pid ]; do sleep 0.01; done; echo started"]
    started = time.monotonic()
    result = finishes_within(15, run, workspace, "shell.run", {"argv": argv, "timeout_s": 30})
    assert result["exit_code"] == 0
    assert result["stdout"] == "started\n"
    assert time.monotonic() - started < 2
    assert pids_with_argument(marker) == []


def test_a_cancel_kills_detached_children_too(workspace, marker):
    cancelled = threading.Event()
    threading.Timer(0.5, cancelled.set).start()
    argv = ["sh", "-c", f"setsid sleep {marker} & sleep 60"]
    error = finishes_within(15, refused, workspace, "shell.run", {"argv": argv}, cancelled=cancelled)
    assert str(error) == "cancelled; the command was killed"
    assert pids_with_argument(marker) == []


@pytest.mark.skipif(landlock.landlock_abi() < 6, reason="signal scoping needs Landlock ABI 6 (Linux 6.12)")
def test_a_command_cannot_signal_its_launcher_or_the_server(workspace):
    # Killing the launcher would let the command's children escape its clean-up.
    # kill -0 only asks whether a signal would be allowed. In a PID namespace of
    # its own the command cannot even name them: its parent's pid is 0 to it.
    if processes_hidden(workspace):
        argv = ["sh", "-c", f"echo $PPID; kill -0 {os.getpid()}; echo $?"]
        result = run(workspace, "shell.run", {"argv": argv})
        assert result["stdout"] == "0\n1\n"
        return
    argv = ["sh", "-c", f"kill -0 $PPID; echo $?; kill -0 {os.getpid()}; echo $?"]
    result = run(workspace, "shell.run", {"argv": argv})
    assert result["stdout"] == "1\n1\n"
    assert "Operation not permitted" in result["stderr"]


def processes_hidden(workspace: Path) -> bool:
    """Whether shell.run's commands get a PID namespace and a /proc of their own here (in it, a shell is pid 1)."""
    return run(workspace, "shell.run", {"argv": ["sh", "-c", "echo $$; readlink /proc/self"]})["stdout"] == "1\n2\n"


# A stand-in for the server (or a worker): runs one shell.run and prints its pid and the outcome.
SERVER = """
import json, os, subprocess, sys
from pathlib import Path
from tools.registry import ToolCall, ToolError
from tools.shell import shell_environment, shell_run

workspace, mode, argv = Path(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3])
print(json.dumps({"server_pid": os.getpid()}), flush=True)
call = ToolCall(params={"argv": argv}, workspace=workspace, shell_max_timeout_seconds=60)
if mode == "plain":  # as shell.run did before its launcher: the server's own child
    done = subprocess.run(argv, env=shell_environment(call), capture_output=True, text=True)
    result = {"stdout": done.stdout, "stderr": done.stderr}
else:
    try:
        result = shell_run(call)
    except ToolError as exc:
        result = {"error": str(exc), **(exc.result or {})}
print(json.dumps(result), flush=True)
"""


def start_server(workspace: Path, argv: list[str], *, mode: str = "shell.run", env=None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", SERVER, str(workspace), mode, json.dumps(argv)],
        cwd=PROJECT_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def test_a_server_that_dies_takes_its_commands_with_it(workspace, marker):
    server = start_server(workspace, ["sh", "-c", f"setsid sleep {marker} & sleep {marker}"])
    deadline = time.monotonic() + 15
    while len(pids_with_argument(marker)) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(pids_with_argument(marker)) == 2
    server.kill()
    server.communicate()
    deadline = time.monotonic() + 5
    while pids_with_argument(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pids_with_argument(marker) == []


# --- shell.run: no secret of the server within reach ----------------------------------------

# Run as the command: walks its ancestry up to pid 1 and reads the environment of
# every process in /proc it can; reports the pids whose environment holds the canary.
PROBE = """
import json, os, sys
canary = sys.argv[1].encode()

def parent(pid):
    with open(f"/proc/{pid}/stat") as stat:
        text = stat.read()
    return int(text[text.rindex(")") + 1:].split()[1])

def holds_canary(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as environ:
            return canary in environ.read()
    except OSError:
        return False

ancestors, pid = [], os.getpid()
while pid > 1:
    pid = parent(pid)
    ancestors.append(pid)
pids = {int(entry) for entry in os.listdir("/proc") if entry.isdigit()} | set(ancestors)
print(json.dumps({"ancestors": ancestors, "leaks": sorted(pid for pid in pids if holds_canary(pid))}))
"""


def probe_from_server(workspace: Path, canary: str, mode: str) -> tuple[int, dict]:
    """Start a server whose environment holds ``canary``; returns its pid and what the probe it ran found."""
    env = {**os.environ, "CONDUCTOR_TEST_CANARY": canary}
    # The system's Python: a command reads only the system's folders, not the project's venv.
    server = start_server(workspace, ["python3", "-I", "-S", "-c", PROBE, canary], mode=mode, env=env)
    stdout, stderr = server.communicate(timeout=60)
    assert server.returncode == 0, stderr
    started, finished = (json.loads(line) for line in stdout.splitlines())
    assert "error" not in finished, finished
    return started["server_pid"], json.loads(finished["stdout"])


def test_no_process_within_the_commands_reach_holds_the_servers_environment(workspace):
    # The server must be a process of its own: /proc/<pid>/environ shows the
    # environment a process started with, not what it put in os.environ later.
    canary = f"canary-{secrets.token_hex(8)}"

    # Started straight from the server, a command reads the canary from its parent.
    server_pid, found = probe_from_server(workspace, canary, "plain")
    assert server_pid in found["leaks"]

    # Through shell.run, the server is still an ancestor, and still unreadable;
    # in a PID namespace of its own, the command sees no ancestor at all.
    server_pid, found = probe_from_server(workspace, canary, "shell.run")
    if processes_hidden(workspace):
        assert found["ancestors"] == []
    else:
        assert server_pid in found["ancestors"]
    assert found["leaks"] == []


def test_a_command_still_reads_its_own_processes(workspace):
    # tr reads the environment of its parent, the shell: both are inside the sandbox.
    result = run(workspace, "shell.run", {"argv": ["sh", "-c", "tr '\\0' '\\n' < /proc/$$/environ"]})
    assert "PATH=/usr/local/bin:/usr/bin:/bin" in result["stdout"].splitlines()


# --- shell.run: the secret key file out of reach ------------------------------------------------


@pytest.fixture
def data_folder(tmp_path):
    """A data folder as the server lays it out: the secret key file beside the workspace and the database."""
    data = tmp_path / "data"
    (data / "workspace").mkdir(parents=True)
    (data / "secret_key").write_text("the-secret-key-value")
    (data / "db.sqlite3").write_text("database")
    return data


def run_hiding(data: Path, argv: list[str]) -> dict:
    """shell.run of ``argv`` in the data folder's workspace, the secret key file and a .env hidden; its result."""
    call = ToolCall(
        params={"argv": argv}, workspace=data / "workspace", shell_max_timeout_seconds=30,
        secret_files=(data / "secret_key", data.parent / ".env"),
    )
    try:
        return tools.get("shell.run").run(call)
    except ToolError as exc:
        assert exc.result is not None, str(exc)
        return exc.result


@pytest.mark.skipif(landlock.sandbox_problem() is not None, reason="no Landlock on this kernel")
def test_a_command_cannot_read_the_secret_key_file_however_it_names_it(data_folder):
    secret_key = data_folder / "secret_key"
    attempts = [
        ["cat", "../secret_key"],
        ["cat", str(secret_key)],
        ["sh", "-c", f"cat /proc/self/root{secret_key}"],
        ["sh", "-c", "cat /proc/self/cwd/../secret_key"],
        ["cp", "../secret_key", "copy"],
        # Another name for it: beside it (a link elsewhere is refused outright), read now and by the next command.
        ["sh", "-c", "ln ../secret_key ../other-name; cat ../other-name"],
        ["cat", "../other-name"],
        ["ln", "../secret_key", "here"],
        ["mv", "../secret_key", "moved"],
    ]
    for argv in attempts:
        result = run_hiding(data_folder, argv)
        assert result["exit_code"] != 0, argv
        assert "the-secret-key-value" not in result["stdout"] + result["stderr"], argv
    assert "Permission denied" in run_hiding(data_folder, ["cat", "../secret_key"])["stderr"]
    assert secret_key.read_text() == "the-secret-key-value"


@pytest.mark.skipif(landlock.sandbox_problem() is not None, reason="no Landlock on this kernel")
def test_a_command_cannot_move_the_secret_key_file_out_of_its_hiding_place(data_folder):
    # Rules are made at each command's start, from the paths: moving the folder
    # aside would leave the next command nothing to hide.
    for argv in (["mv", str(data_folder), f"{data_folder}-moved"], ["mv", "../secret_key", "../renamed"],
                 ["rm", "../secret_key"]):
        assert run_hiding(data_folder, argv)["exit_code"] != 0, argv
    assert (data_folder / "secret_key").read_text() == "the-secret-key-value"
    assert "the-secret-key-value" not in run_hiding(data_folder, ["cat", "../secret_key"])["stdout"]


@pytest.mark.skipif(landlock.sandbox_problem() is not None, reason="no Landlock on this kernel")
def test_a_command_sees_its_workspace_and_the_systems_files_and_nothing_around_them(data_folder):
    result = run_hiding(data_folder, ["sh", "-c", (
        "mkdir -p src/deep && echo made > src/deep/f && cat src/deep/f && rm -r src"
        " && echo again > g && cat g && rm g"
        " && head -c 4 /etc/passwd && echo && python3 -c 'print(3)' && ls /usr | grep -c bin"
        " && { cat ../db.sqlite3 || ls .. || echo unseen; }"
    )])
    assert result["exit_code"] == 0, result["stderr"]
    assert result["stdout"].splitlines() == ["made", "again", "root", "3", "2", "unseen"]
    assert result["stderr"].count("Permission denied") == 2, result["stderr"]


@pytest.mark.parametrize("name", ["secret_key", "other-name"])
def test_file_tools_refuse_the_secret_key_file_in_a_workspace_that_holds_it(data_folder, name):
    # A workspace set to the data folder itself.
    os.link(data_folder / "secret_key", data_folder / "other-name")
    calls = [("files.read", {"path": name}), ("files.write", {"path": name, "content": "x", "mode": "overwrite"})]
    for tool, params in calls:
        call = ToolCall(params=params, workspace=data_folder, shell_max_timeout_seconds=30,
                        secret_files=(data_folder / "secret_key",))
        with pytest.raises(ToolError, match="holds the server's secret key"):
            tools.get(tool).run(call)
    assert (data_folder / "secret_key").read_text() == "the-secret-key-value"
    call = ToolCall(params={"path": "db.sqlite3"}, workspace=data_folder, shell_max_timeout_seconds=30,
                    secret_files=(data_folder / "secret_key",))
    assert tools.get("files.read").run(call)["text"] == "database"


def test_the_launcher_grants_around_the_hidden_paths_only(tmp_path):
    (tmp_path / "data" / "workspace" / "deep").mkdir(parents=True)
    (tmp_path / "data" / "secret_key").write_text("k")
    os.link(tmp_path / "data" / "secret_key", tmp_path / "data" / "hard-link")
    (tmp_path / "data" / "db").write_text("d")
    (tmp_path / "data" / "link").symlink_to("db")
    (tmp_path / "beside").mkdir()
    grants = dict(landlock.hidden_paths_rules([str(tmp_path / "data" / "secret_key"), str(tmp_path / "missing")],
                                              beneath="/"))
    assert grants[str(tmp_path / "beside")] is True
    assert grants[str(tmp_path / "data" / "workspace")] is True
    assert grants[str(tmp_path / "data" / "db")] is False
    for never in ("data/secret_key", "data/hard-link", "data/link", "data", "data/workspace/deep", "missing"):
        assert str(tmp_path / never) not in grants, never
    assert landlock.hidden_paths_rules([str(tmp_path / "missing")], beneath="/") == []


@pytest.mark.parametrize("argv,parsed", [
    (["l", "5", "--", "ls"], (5, launcher.Sandbox(), ["ls"])),
    (["l", "5", "--read", "/usr", "--hide", "/a", "--hide", "/b c", "--network", "--", "cat", "--hide"],
     (5, launcher.Sandbox(readable=("/usr",), hidden=("/a", "/b c"), network=True), ["cat", "--hide"])),
    (["l", "exec", "--hide", "/a", "--write", "/w", "--unconfined", "--", "server", "stdio"],
     (None, launcher.Sandbox(hidden=("/a",), writable=("/w",), unconfined=True), ["server", "stdio"])),
])
def test_the_launcher_reads_its_options_before_the_command(argv, parsed):
    assert launcher.parse_arguments(argv) == parsed


@pytest.mark.parametrize("argv", [
    ["l"], ["l", "5"], ["l", "5", "--"], ["l", "5", "--hide", "--"], ["l", "5", "--write", "--"], ["l", "5", "ls"],
])
def test_the_launcher_refuses_arguments_it_cannot_read(argv):
    with pytest.raises(SystemExit):
        launcher.parse_arguments(argv)


# --- plans: what a call would do, resolved as its run resolves it ----------------------------------


def plan(workspace: Path, tool: str, params: dict, *, max_timeout: float = 300):
    call = ToolCall(params=params, workspace=workspace, shell_max_timeout_seconds=max_timeout)
    return tools.get(tool).plan(call)


def test_shell_runs_plan_names_the_real_folder_and_the_capped_timeout(workspace):
    (workspace / "src").mkdir()
    (workspace / "link").symlink_to(workspace / "src")
    assert plan(workspace, "shell.run", {"argv": ["ls", "-la"], "cwd": "link", "timeout_s": 900}, max_timeout=60) == {
        "argv": ["ls", "-la"], "working folder": str((workspace / "src").resolve()), "timeout": "60 s",
        "network": shell.NETWORK_NONE,
    }
    assert plan(workspace, "shell.run", {"argv": ["id"]})["working folder"] == str(workspace.resolve())


@pytest.mark.parametrize("cwd,error", [
    ("../..", "leads outside the workspace"), ("/etc", "is absolute"), ("nope", "is not a folder"),
])
def test_shell_runs_plan_refuses_what_its_run_refuses(workspace, cwd, error):
    with pytest.raises(ToolError, match=error):
        plan(workspace, "shell.run", {"argv": ["id"], "cwd": cwd})
    assert error in str(refused(workspace, "shell.run", {"argv": ["id"], "cwd": cwd}))


def test_files_writes_plan_names_the_real_file_and_writes_nothing(workspace):
    assert plan(workspace, "files.write", {"path": "a/b.txt", "content": "héllo", "mode": "append"}) == {
        "file": str((workspace / "a" / "b.txt").resolve()), "mode": "append", "bytes": 6,
    }
    assert not (workspace / "a").exists()
    with pytest.raises(ToolError, match="leads outside"):
        plan(workspace, "files.write", {"path": "../x", "content": ""})
