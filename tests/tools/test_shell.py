"""shell.run and stdio MCP servers write only in the workspace and a temp folder of their own (SPEC §5.1).

The data folder is laid out as the server lays it out: the workspace beside
the databases and the embedded channel layer's doorbell registry, which a
command once could fill with a FIFO that hung the next server's start.
"""

import hashlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tools import landlock
from tools.mcp_endpoint import McpEndpoint, sandboxed_argv, server_environment
from tools.mcp_processes import OwnFolders
from tools.registry import ToolCall, ToolError, tools

pytestmark = pytest.mark.skipif(landlock.sandbox_problem() is not None, reason="no Landlock on this kernel")


@pytest.fixture
def data(tmp_path):
    data = tmp_path / "data"
    (data / "workspace").mkdir(parents=True)
    (data / "channels.sqlite3").write_text("layer")
    (data / "channels.sqlite3-doorbells").mkdir(mode=0o700)
    (data / "channels.sqlite3-doorbells" / "specific.abc!").write_text("5000 1 secret")
    (data / "secret_key").write_text("the-secret-key-value")
    return data


def shell(data: Path, script: str) -> dict:
    """shell.run of ``sh -c script`` in the data folder's workspace, the secret key hidden; its result."""
    call = ToolCall(params={"argv": ["sh", "-c", script]}, workspace=data / "workspace",
                    shell_max_timeout_seconds=30, secret_files=(data / "secret_key",))
    try:
        return tools.get("shell.run").run(call)
    except ToolError as exc:
        assert exc.result is not None, str(exc)
        return exc.result


def snapshot(folder: Path) -> dict[str, str]:
    """Every entry below ``folder`` but the workspace: its type, mode and contents."""
    found = {}
    for path in sorted(folder.rglob("*")):
        if (folder / "workspace") in (path, *path.parents):
            continue
        info = path.lstat()
        content = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() and not path.is_symlink() else ""
        found[str(path.relative_to(folder))] = f"{info.st_mode:o} {content}"
    return found


def temp_entries() -> set[str]:
    return set(os.listdir(tempfile.gettempdir()))


ESCAPES = {
    "a new file beside the workspace": "touch ../new",
    "a new folder beside the workspace": "mkdir ../folder",
    "a FIFO in the doorbell registry": "mkfifo ../channels.sqlite3-doorbells/x",
    "a symlink in the doorbell registry": "ln -s /dev/zero ../channels.sqlite3-doorbells/y",
    "a socket in the data folder": "python3 -c 'import socket; socket.socket(socket.AF_UNIX).bind(\"../sock\")'",
    "a doorbell entry replaced": "echo '1 1 forged' > ../channels.sqlite3-doorbells/specific.abc!",
    "a doorbell entry removed": "rm ../channels.sqlite3-doorbells/specific.abc!",
    "the layer's database appended to": "echo more >> ../channels.sqlite3",
    "the layer's database truncated": "truncate -s 0 ../channels.sqlite3",
    "the layer's database removed": "rm ../channels.sqlite3",
    "the layer's database renamed": "mv ../channels.sqlite3 ../renamed",
    "the layer's database moved into the workspace": "mv ../channels.sqlite3 here",
    "a workspace file moved out": "touch mine && mv mine ../mine",
    "a workspace file linked out": "touch mine && ln mine ../mine",
    "the secret key overwritten": "echo x > ../secret_key",
    "the workspace itself removed": "cd .. && rmdir workspace || rm -r workspace",
    "an absolute path": "touch \"$(cd .. && pwd)/absolute\"",
    "the system temp folder": f"touch {tempfile.gettempdir()}/conductor-escape-$$",
    "beside its own temp folder": "touch \"$TMPDIR/../conductor-escape-$$\"",
}


@pytest.mark.parametrize("escape", ESCAPES)
def test_a_command_changes_nothing_outside_the_workspace(data, escape):
    before, temp_before = snapshot(data), temp_entries()
    result = shell(data, ESCAPES[escape])
    assert result["exit_code"] != 0, result
    assert "Permission denied" in result["stderr"] or "Operation not permitted" in result["stderr"], result
    assert snapshot(data) == before
    assert not {name for name in temp_entries() - temp_before if "escape" in name}


def test_a_command_writes_in_the_workspace_and_its_own_temp_folder(data):
    result = shell(data, (
        "mkdir -p a/b && echo one > a/b/f && mv a/b/f a/g && ln -s g a/link && mkfifo a/fifo"
        " && truncate -s 2 a/g && cat a/g && echo && rm -r a"
        " && echo kept > kept && echo \"$TMPDIR\" && echo temp > \"$TMPDIR/t\" && mv \"$TMPDIR/t\" from-temp"
        " && cat from-temp && python3 -c 'import tempfile; print(tempfile.mkstemp()[1])'"
    ))
    assert result["exit_code"] == 0, result["stderr"]
    lines = result["stdout"].splitlines()
    assert lines[0] == "on" and lines[2] == "temp"
    temp = Path(lines[1])
    assert temp.parent == Path(tempfile.gettempdir()) and temp.name.startswith("conductor-shell-")
    assert lines[3].startswith(f"{temp}/")
    assert not temp.exists()  # removed with the command
    assert sorted(path.name for path in (data / "workspace").iterdir()) == ["from-temp", "kept"]


def test_a_command_still_writes_where_programs_need_to(data):
    result = shell(data, (
        "echo x > /dev/null && echo y 2>/dev/null >&2 && head -c 3 /dev/zero | wc -c && echo z > /dev/stderr"
        " && git init -q repo && cd repo && git -c user.name=a -c user.email=a@b commit -q --allow-empty -m m"
        " && git log --format=%s"
    ))
    assert result["exit_code"] == 0, result["stderr"]
    assert result["stdout"].split() == ["3", "m"]
    assert result["stderr"] == "z\n"


def test_each_command_gets_a_private_temp_folder_of_its_own(data):
    first = shell(data, "echo \"$TMPDIR\"; stat -c %a \"$TMPDIR\"; touch \"$TMPDIR/left\"")
    second = shell(data, "echo \"$TMPDIR\"; ls -A \"$TMPDIR\"")
    folder, mode = first["stdout"].split()
    assert mode == "700"
    assert second["stdout"].split() == [second["stdout"].split()[0]] and second["stdout"].split()[0] != folder


def test_a_workspace_that_holds_the_secret_key_keeps_it_where_it_is(data):
    # A workspace set to the data folder itself: written around the key, as it is read around it.
    call = ToolCall(params={"argv": ["sh", "-c", (
        "echo ok > workspace/new && echo changed > channels.sqlite3 && cat workspace/new;"
        " mv secret_key moved; rm secret_key; echo x > secret_key; ln secret_key other; cat secret_key"
    )]}, workspace=data, shell_max_timeout_seconds=30, secret_files=(data / "secret_key",))
    with pytest.raises(ToolError) as caught:
        tools.get("shell.run").run(call)
    assert caught.value.result["stdout"] == "ok\n"
    assert (data / "channels.sqlite3").read_text() == "changed\n"
    assert (data / "secret_key").read_text() == "the-secret-key-value"
    assert not (data / "moved").exists() and not (data / "other").exists()


def test_the_launcher_grants_writing_beneath_the_writable_folders_only(tmp_path):
    (tmp_path / "data" / "workspace" / "deep").mkdir(parents=True)
    (tmp_path / "data" / "secret_key").write_text("k")
    (tmp_path / "data" / "db").write_text("d")
    abi = landlock.landlock_abi()
    grants = dict(landlock.writable_rules(abi, [str(tmp_path / "data" / "workspace")],
                                          [str(tmp_path / "data" / "secret_key")]))
    assert grants[str(tmp_path / "data" / "workspace")] & landlock.LANDLOCK_ACCESS_FS_MAKE_REG
    assert not grants[str(tmp_path / "data" / "workspace")] & landlock.DEVICE_MAKING
    assert grants["/dev/null"] == landlock.LANDLOCK_ACCESS_FS_READ_FILE | landlock.LANDLOCK_ACCESS_FS_WRITE_FILE
    assert str(tmp_path / "data") not in grants and str(tmp_path) not in grants
    # A writable folder that holds a hidden file: granted around it.
    around = dict(landlock.writable_rules(abi, [str(tmp_path / "data")], [str(tmp_path / "data" / "secret_key")]))
    assert str(tmp_path / "data") not in around and str(tmp_path / "data" / "secret_key") not in around
    assert around[str(tmp_path / "data" / "workspace")] & landlock.LANDLOCK_ACCESS_FS_REMOVE_FILE
    assert not around[str(tmp_path / "data" / "db")] & landlock.LANDLOCK_ACCESS_FS_REMOVE_FILE


# --- stdio MCP servers: the same confinement, with a home and temp folder of their own -----------------


def test_a_stdio_server_writes_only_in_the_workspace_and_its_own_folders(data):
    own = OwnFolders()
    try:
        endpoint = McpEndpoint(name="own", command="sh", args=("-c", (
            "touch workspace-file \"$HOME/home-file\" \"$TMPDIR/temp-file\" \"$XDG_CACHE_HOME-file\" && echo wrote;"
            " touch ../outside; mkfifo ../channels.sqlite3-doorbells/x; touch /tmp/conductor-escape-$$"
        )), hidden_files=(str(data / "secret_key"),))
        before = snapshot(data)
        done = subprocess.run(
            [sys.executable, *sandboxed_argv(endpoint, (data / "workspace", own.root))],
            cwd=data / "workspace", env=server_environment(endpoint, data / "workspace", own.environment()),
            capture_output=True, text=True, timeout=30,
        )
        assert done.stdout == "wrote\n", done.stderr
        assert done.stderr.count("Permission denied") == 3, done.stderr
        assert snapshot(data) == before
        assert (data / "workspace" / "workspace-file").exists() and (own.home / "home-file").exists()
        assert (own.temp / "temp-file").exists()
        assert not own.root.is_relative_to(data / "workspace")
        assert oct(own.root.stat().st_mode & 0o777) == "0o700"
    finally:
        own.remove()
    assert not own.root.exists()


# --- other processes out of sight: a PID namespace and a /proc of the command's own ----------------


@pytest.mark.skipif(os.geteuid() != 0, reason="as another user the PID namespace needs unprivileged user namespaces, "
                                              "which a machine may refuse (then commands see every process)")
def test_a_command_cannot_read_the_command_line_of_the_server_or_its_other_processes(data, marker_process):
    server, other = os.getpid(), marker_process
    assert b"conductor-wsh-canary" in Path(f"/proc/{other.pid}/cmdline").read_bytes()  # as the command once could
    result = shell(data, f"cat /proc/{server}/cmdline; cat /proc/{other.pid}/cmdline; ls /proc | grep -c '^[0-9]'")
    assert result["stdout"].splitlines()[-1] in ("2", "3")  # sh, ls, grep: the command's own, nothing else
    assert "conductor-wsh-canary" not in result["stdout"] and "pytest" not in result["stdout"]
    assert result["stderr"].count("No such file or directory") == 2
    # Ordinary commands still see their own processes.
    result = shell(data, "echo $$; readlink /proc/self; ps -o pid=,comm= | head -2; tr '\\0' ' ' < /proc/1/cmdline")
    assert result["exit_code"] == 0, result["stderr"]
    assert result["stdout"].splitlines()[:2] == ["1", "2"]
    assert result["stdout"].splitlines()[2].split() == ["1", "sh"]


@pytest.fixture
def marker_process():
    """A process of this user with a secret in its command line, as a server's worker might have."""
    process = subprocess.Popen(["sh", "-c", "sleep 60", "conductor-wsh-canary"])
    deadline = time.monotonic() + 10
    while b"conductor-wsh-canary" not in Path(f"/proc/{process.pid}/cmdline").read_bytes():  # until it has exec'd
        assert time.monotonic() < deadline
        time.sleep(0.01)
    yield process
    process.kill()
    process.wait()


def test_a_stdio_servers_own_folders_are_removed_when_its_session_ends(tmp_path, monkeypatch):
    from tools import mcp_client

    made = []

    class Recorded(OwnFolders):
        def __init__(self, home: str = "") -> None:
            super().__init__(home)
            made.append(self)

    monkeypatch.setattr(mcp_client, "OwnFolders", Recorded)
    server = Path(__file__).resolve().parents[1] / "mcp_servers" / "own_server.py"
    endpoint = McpEndpoint(name="own", command=sys.executable, args=(str(server), "stdio"))
    result = mcp_client.mcp_tool_call(endpoint, tool="add", arguments={"a": 1, "b": 2}, workspace=tmp_path,
                                      keep_alive=False)
    assert result["structuredContent"] == {"result": 3}
    assert len(made) == 1 and not made[0].root.exists()


def test_a_stdio_server_sees_nothing_of_the_data_folder_and_writes_in_its_entrys_writable_folders(data, tmp_path):
    notes = tmp_path / "notes"
    notes.mkdir()
    own = OwnFolders(str(data / "mcp" / "own" / "home"))
    try:
        endpoint = McpEndpoint(name="own", command="sh", args=("-c", (
            f"touch {notes}/note \"$HOME/kept\" && echo wrote; cat ../secret_key ../channels.sqlite3; ls ..;"
            " touch ../outside"
        )), hidden_files=(str(data / "secret_key"),), writable=(str(notes),), private_folders=(str(data),))
        done = subprocess.run(
            [sys.executable, *sandboxed_argv(endpoint, (data / "workspace", *own.writable))],
            cwd=data / "workspace", env=server_environment(endpoint, data / "workspace", own.environment()),
            capture_output=True, text=True, timeout=30,
        )
    finally:
        own.remove()
    assert done.stdout == "wrote\n", done.stderr
    assert done.stderr.count("Permission denied") == 4, done.stderr
    assert (notes / "note").exists() and not (data / "outside").exists()
    assert (data / "mcp" / "own" / "home" / "kept").exists()  # the home outlives its session


def test_a_stdio_server_reads_the_installation_its_command_line_names(tmp_path):
    from tools.mcp_endpoint import server_readable

    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    script = venv / "bin" / "mcp-server-x"
    script.write_text(f"#!{sys.executable}\n")
    script.chmod(0o755)
    (tmp_path / "srv").mkdir()
    (tmp_path / "srv" / "server.js").write_text("")
    endpoint = McpEndpoint(name="x", command=str(script), args=(str(tmp_path / "srv" / "server.js"), "--flag"))
    places = server_readable(endpoint, tmp_path / "workspace", {"PATH": "/usr/bin"})
    assert str(venv) in places and str(tmp_path / "srv") in places
    interpreter = Path(os.path.realpath(sys.executable))
    assert str(interpreter.parent.parent) in places  # the interpreter's prefix, where its #! leads
    assert str(tmp_path / "workspace") in places


def test_a_refused_write_says_where_the_server_may_write():
    from tools.mcp_results import write_refused_hint

    error = "EACCES: permission denied, open '/srv/other/x'"
    assert write_refused_hint(error, ["/w", "/h"]) == f"{error} (the sandbox lets this server write only in: /w, /h)"
    assert write_refused_hint("no such tool", ["/w"]) == "no such tool"
    assert write_refused_hint(error, []) == error


@pytest.mark.parametrize("writable,problem", [
    (["/srv/notes"], ""),
    ("/srv/notes", "a JSON list of absolute paths"),
    (["notes"], "'notes' is not an absolute path"),
    (["{data}"], "is the data folder, in it or around it"),
    (["{data}/mcp"], "is the data folder, in it or around it"),
    (["/"], "is the data folder, in it or around it"),
])
def test_an_mcp_servers_writable_folders_keep_away_from_the_data_folder(settings, writable, problem):
    from mcp_servers.models import writable_problem

    if isinstance(writable, list):
        writable = [path.format(data=settings.DATA_DIR) for path in writable]
    assert (writable_problem(writable) == "") if not problem else (problem in writable_problem(writable))
