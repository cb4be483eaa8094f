"""What an approved ``shell.run`` sees and reaches (SPEC §5.1): the system's files and its workspace,
nothing of the server's state, and no one: neither the server, nor PostgreSQL, nor Redis.

The data folder is laid out as the server lays it out, with a live session in
its database, as an attacker found it: the command once read a superuser's
session key through ``sqlite3 file:../conductor.sqlite3?mode=ro`` and used it
on the server's port.
"""

import logging
import socket
import sqlite3
from pathlib import Path

import pytest

from tools import landlock, shell
from tools.registry import ToolCall, ToolError, tools

pytestmark = pytest.mark.skipif(landlock.sandbox_problem() is not None, reason="no Landlock on this kernel")

SESSION_KEY = "superuser-session-key"
REFUSING_LAUNCHER = Path(__file__).with_name("refusing_launcher.py")


@pytest.fixture
def data(tmp_path):
    data = tmp_path / "data"
    (data / "workspace").mkdir(parents=True)
    with sqlite3.connect(data / "conductor.sqlite3") as db:
        db.execute("create table django_session (session_key text, session_data text)")
        db.execute("insert into django_session values (?, 'x')", (SESSION_KEY,))
    (data / "conductor.sqlite3-wal").write_text(SESSION_KEY)
    (data / "channels.sqlite3").write_text("layer")
    (data / "secret_key").write_text("the-secret-key-value")
    (data / "logs").mkdir()
    (data / "logs" / "conductor.log").write_text(f"sessionid={SESSION_KEY}")
    return data


def run(data: Path, argv: list[str], **options) -> dict:
    """shell.run of ``argv`` in the data folder's workspace, as the dispatcher calls it; its result."""
    call = ToolCall(params={"argv": argv}, workspace=data / "workspace", shell_max_timeout_seconds=30,
                    secret_files=(data / "secret_key",), private_folders=(data,), **options)
    try:
        return tools.get("shell.run").run(call)
    except ToolError as exc:
        assert exc.result is not None, str(exc)
        return exc.result


def python(data: Path, code: str, *args: str, **options) -> dict:
    return run(data, ["python3", "-c", code, *args], **options)


READS = {
    "the database": "print(open('../conductor.sqlite3', 'rb').read())",
    "the database, read-only through a URI": (
        "import sqlite3; print(sqlite3.connect('file:../conductor.sqlite3?mode=ro', uri=True)"
        ".execute('select session_key from django_session').fetchall())"
    ),
    "the database by its absolute path": "import os; print(open(os.path.abspath('../conductor.sqlite3'), 'rb').read())",
    "its journal": "print(open('../conductor.sqlite3-wal').read())",
    "the channel layer's database": "print(open('../channels.sqlite3').read())",
    "the key": "print(open('../secret_key').read())",
    "a log": "print(open('../logs/conductor.log').read())",
    "the data folder's entries": "import os; print(os.listdir('..'))",
}


@pytest.mark.parametrize("what", READS)
def test_a_command_reads_nothing_of_the_data_folder_around_its_workspace(data, what):
    result = python(data, READS[what])
    assert result["exit_code"] != 0
    assert SESSION_KEY not in result["stdout"] and "the-secret-key-value" not in result["stdout"]
    assert "layer" not in result["stdout"] and "conductor.sqlite3" not in result["stdout"]
    assert "Permission denied" in result["stderr"] or "unable to open database file" in result["stderr"]


def test_a_command_still_reads_and_writes_its_workspace_and_reads_the_system(data):
    (data / "workspace" / "notes.txt").write_text("mine")
    result = run(data, ["sh", "-c", (
        "cat notes.txt && echo && echo made > made.txt && cat made.txt && head -c 4 /etc/passwd && echo"
        " && ls /usr/bin | grep -cx python3 && python3 -c 'import json; print(json.dumps(1))'"
    )])
    assert result["exit_code"] == 0, result["stderr"]
    assert result["stdout"].splitlines() == ["mine", "made", "root", "1", "1"]


def test_a_data_folder_inside_a_system_folder_is_seen_around_whatever_it_holds(tmp_path, monkeypatch):
    # A checkout under /opt: the system folder is read, the data folder in it is not,
    # including a file nobody named (the list says what may be seen, not what is hidden).
    data = tmp_path / "opt" / "conductor" / "data"
    (data / "workspace").mkdir(parents=True)
    (tmp_path / "opt" / "conductor" / "README").write_text("readme")
    (data / "added-later.sqlite3").write_text(SESSION_KEY)
    monkeypatch.setattr(shell, "SYSTEM_FOLDERS", (*shell.SYSTEM_FOLDERS, str(tmp_path / "opt")))
    result = run(data, ["sh", "-c", "cat ../../README; echo; cat ../added-later.sqlite3; ls .."])
    assert result["stdout"] == "readme\n"
    assert result["stderr"].count("Permission denied") == 2, result["stderr"]


def test_the_grants_go_around_the_hidden_paths_in_a_readable_folder(tmp_path):
    (tmp_path / "conductor" / "data" / "workspace").mkdir(parents=True)
    (tmp_path / "conductor" / "manage.py").write_text("")
    (tmp_path / "usr").mkdir()
    grants = dict(landlock.readable_rules(
        [str(tmp_path / "usr"), str(tmp_path / "conductor"), str(tmp_path / "conductor" / "data" / "workspace")],
        [str(tmp_path / "conductor" / "data"), str(tmp_path / "missing")],
    ))
    assert grants == {
        str(tmp_path / "usr"): landlock.READ_ACCESS,
        str(tmp_path / "conductor" / "manage.py"): landlock.FILE_READ_ACCESS,
    }


@pytest.fixture
def listener():
    """A port on this machine's loopback, as the server's is."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        yield server.getsockname()[1]


CONNECT = "import socket, sys; socket.create_connection(('127.0.0.1', int(sys.argv[1])), 3); print('connected')"


@pytest.mark.parametrize("port", ["the server's", 5432, 6379])
def test_a_command_reaches_neither_the_server_nor_postgresql_nor_redis(data, listener, port):
    port = listener if port == "the server's" else port
    result = python(data, CONNECT, str(port))
    assert result["exit_code"] != 0 and "connected" not in result["stdout"]
    assert "Connection refused" in result["stderr"] or "unreachable" in result["stderr"], result["stderr"]


def test_a_command_reaches_no_unix_socket(data, tmp_path):
    # PostgreSQL's and Redis's sockets are reached by path, past a network namespace.
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(tmp_path / "server.sock"))
        server.listen()
        code = "import socket, sys; s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); print('connected')"
        result = python(data, code, str(tmp_path / "server.sock"))
    assert result["exit_code"] != 0 and "connected" not in result["stdout"]
    assert "PermissionError" in result["stderr"], result["stderr"]


def test_a_command_without_network_still_talks_to_itself(data):
    result = python(data, (
        "import socket, multiprocessing\n"
        "a, b = socket.socketpair(); a.send(b'pair'); print(b.recv(4).decode())\n"
        "multiprocessing.Lock(); print('lock')\n"
        "with socket.create_server(('127.0.0.1', 0)) as s:\n"
        "    socket.create_connection(s.getsockname(), 3); print('own loopback')\n"
    ))
    assert result["exit_code"] == 0, result["stderr"]
    assert result["stdout"].splitlines() == ["pair", "lock", "own loopback"]


def test_with_the_network_allowed_a_command_reaches_this_machines_loopback(data, listener):
    result = python(data, CONNECT, str(listener), allow_network=True)
    assert result["exit_code"] == 0, result["stderr"]
    assert result["stdout"] == "connected\n"
    # Its files are confined all the same.
    assert python(data, READS["the key"], allow_network=True)["exit_code"] != 0


def test_where_the_kernel_refuses_the_namespaces_a_command_is_refused_unless_the_setting_says(
    data, monkeypatch, caplog
):
    monkeypatch.setattr(shell, "LAUNCHER", REFUSING_LAUNCHER)
    call = ToolCall(params={"argv": ["touch", "ran"]}, workspace=data / "workspace", shell_max_timeout_seconds=30,
                    private_folders=(data,))
    with pytest.raises(ToolError) as refused:
        tools.get("shell.run").run(call)
    assert str(refused.value) == (
        "shell.run cannot confine commands on this machine: the kernel refused a PID and network namespace: "
        "unshare: Operation not permitted (an operator may set CONDUCTOR_SHELL_UNCONFINED=1 to run them unconfined)"
    )
    assert not (data / "workspace" / "ran").exists()

    monkeypatch.setattr(shell, "_unconfined_said", False)
    with caplog.at_level(logging.WARNING, logger="tools.shell"):
        result = run(data, ["sh", "-c", "touch ran && cat ../secret_key"], unconfined=True)
    assert (data / "workspace" / "ran").exists()
    assert "the-secret-key-value" not in result["stdout"]  # Landlock still holds
    assert "action=shell_unconfined" in caplog.text and "network namespace" in caplog.text
