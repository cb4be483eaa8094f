"""The embedded channel layer's doorbell (conductor_site/channel_layer.py), across real processes.

The receivers here poll the database only once an hour unless rung, so a
message that arrives at all was rung to its receiver; the timeouts only stop
a test that would otherwise hang.
"""

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings

from tests.conductor_site.workers import doorbell_layer
from tests.procs import run_in_processes, started_in_processes

pytestmark = [
    pytest.mark.skipif("channels" not in settings.DATABASES, reason="the embedded channel layer (no REDIS_URL)"),
    pytest.mark.django_db(transaction=True, databases="__all__"),
]

AN_HOUR = 3600.0
GIVE_UP_SECONDS = 60


def registry() -> Path:
    from conductor_site.channel_layer import doorbell_folder

    return doorbell_folder(str(settings.DATABASES["channels"]["NAME"]))


async def receive(layer, channel: str) -> dict:
    return await asyncio.wait_for(layer.receive(channel), timeout=GIVE_UP_SECONDS)


async def until(predicate) -> None:
    async with asyncio.timeout(GIVE_UP_SECONDS):
        while not predicate():
            await asyncio.sleep(0.01)


def test_a_sleeping_receiver_in_another_process_is_rung_for_sends_and_group_sends():
    echoes = 10

    async def exchange(layer, me):
        peer = (await receive(layer, me))["channel"]
        replies = []
        for n in range(echoes):
            # Alternately to the peer's channel and to its group.
            if n % 2:
                await layer.group_send("doorbell-test", {"type": "echo", "n": n})
            else:
                await layer.send(peer, {"type": "echo", "n": n})
            replies.append((await receive(layer, me))["n"])
        return replies

    layer = doorbell_layer(AN_HOUR)
    me = asyncio.run(layer.new_channel())
    with started_in_processes(
        "tests.conductor_site.workers:doorbell_echo", [(me, "doorbell-test", echoes, AN_HOUR)]
    ) as (peer,):
        replies = asyncio.run(exchange(layer, me))
        assert peer.get(timeout=GIVE_UP_SECONDS) == echoes

    assert replies == list(range(echoes))


def test_no_message_waits_for_the_fallback_poll_when_several_processes_send_at_once():
    senders, count = 3, 40

    async def collect(layer, me):
        received = []
        started = asyncio.ensure_future(receive(layer, me))
        await until(lambda: (registry() / layer.non_local_name(me)).exists())
        with started_in_processes(
            "tests.conductor_site.workers:doorbell_flood", [(me, s, count, AN_HOUR) for s in range(senders)]
        ) as pending:
            received.append(await started)
            while len(received) < senders * count:
                received.append(await receive(layer, me))
            assert [result.get(timeout=GIVE_UP_SECONDS) for result in pending] == [count] * senders
        return received

    layer = doorbell_layer(AN_HOUR)
    me = asyncio.run(layer.new_channel())
    received = asyncio.run(collect(layer, me))

    assert sorted((m["sender"], m["n"]) for m in received) == [(s, n) for s in range(senders) for n in range(count)]


def test_a_message_nobody_rang_for_is_found_by_the_fallback_poll():
    async def main(layer, me):
        waiting = asyncio.ensure_future(receive(layer, me))
        await until(lambda: (registry() / layer.non_local_name(me)).exists())
        await asyncio.to_thread(run_in_processes, "tests.conductor_site.workers:plain_send",
                                [(me, {"type": "unrung"})])
        return await waiting

    layer = doorbell_layer(0.2)
    me = asyncio.run(layer.new_channel())
    assert asyncio.run(main(layer, me)) == {"type": "unrung"}


def test_a_poller_registers_its_doorbell_removes_dead_processes_entries_and_unregisters_when_it_ends():
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    folder = registry()
    folder.mkdir(parents=True, exist_ok=True)
    stale = folder / "specific.stale!"
    stale.write_text(f"9 {dead.pid}")

    async def main(layer, me):
        waiting = asyncio.ensure_future(receive(layer, me))
        entry = folder / layer.non_local_name(me)
        await until(entry.exists)
        port, pid, _secret = entry.read_text().split()
        waiting.cancel()
        return int(port), int(pid)

    layer = doorbell_layer(AN_HOUR)
    me = asyncio.run(layer.new_channel())
    port, pid = asyncio.run(main(layer, me))  # asyncio.run cancels the poller as it ends

    assert pid == os.getpid() and port > 0
    assert not stale.exists()
    assert not (folder / layer.non_local_name(me)).exists()


@pytest.mark.parametrize(("name", "folder"), [
    ("/data/channels.sqlite3", Path("/data/channels.sqlite3-doorbells")),
    (":memory:", None),
    ("file:memorydb?mode=memory&cache=shared", None),
    ("", None),
])
def test_doorbell_folder_sits_beside_a_database_file_and_there_is_none_for_memory(name, folder):
    from conductor_site.channel_layer import doorbell_folder

    assert doorbell_folder(name) == folder


def test_datagrams_without_the_doorbells_secret_wake_no_poll_and_are_logged_once(caplog):
    """A local flood of datagrams on the doorbell's port costs no database reads (issue 34, item 5)."""
    import logging
    import socket

    caplog.set_level(logging.WARNING, logger="conductor_site.channel_layer")

    async def main(layer, me):
        polls = 0
        read = layer._receive_single_from_db

        async def counted(prefix):
            nonlocal polls
            polls += 1
            return await read(prefix)

        layer._receive_single_from_db = counted
        waiting = asyncio.ensure_future(receive(layer, me))
        entry = registry() / layer.non_local_name(me)
        await until(entry.exists)
        port, _pid, secret = entry.read_text().split()
        await asyncio.sleep(0.1)
        before = polls
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as flood:
            for n in range(2000):
                flood.sendto([b"\x01", b"", secret[:-1].encode(), b"x" * 64][n % 4], ("127.0.0.1", int(port)))
                if n % 200 == 0:
                    await asyncio.sleep(0)
        await asyncio.sleep(0.3)
        flooded = polls - before
        # The secret itself rings: the poller reads once more and finds the message sent meanwhile.
        await layer.send(me, {"type": "after.the.flood"})
        return flooded, await waiting

    layer = doorbell_layer(AN_HOUR)
    me = asyncio.run(layer.new_channel())
    flooded, message = asyncio.run(main(layer, me))

    assert flooded == 0
    assert message == {"type": "after.the.flood"}
    refusals = [r.getMessage() for r in caplog.records if "action=doorbell_refused" in r.getMessage()]
    assert len(refusals) <= 1  # none where the kernel drops them; else at most one line a minute


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the kernel's socket filter is Linux's")
def test_the_kernel_passes_the_doorbell_only_its_secret():
    import socket

    from conductor_site.channel_layer import doorbell_socket, new_secret

    secret = new_secret()
    with doorbell_socket(secret) as bell, socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender:
        for datagram in [b"\x01", secret[:-1] + b"x", b"y" * len(secret), secret + b"z", secret[:4], secret]:
            sender.sendto(datagram, bell.getsockname())
        bell.settimeout(5)
        assert bell.recv(100) == secret
        bell.setblocking(False)
        with pytest.raises(BlockingIOError):
            bell.recv(100)


def test_a_doorbell_without_the_kernels_filter_drops_other_datagrams_itself_and_logs_them_once_a_minute(caplog):
    import logging

    from conductor_site.channel_layer import Doorbell

    caplog.set_level(logging.WARNING, logger="conductor_site.channel_layer")
    bell = Doorbell("specific.x!", b"s" * 32)
    for _ in range(1000):
        bell.datagram_received(b"\x01", ("127.0.0.1", 5000))
    assert not bell.rung.is_set()
    bell.datagram_received(b"s" * 32, ("127.0.0.1", 5000))
    assert bell.rung.is_set()
    assert caplog.text.count("action=doorbell_refused") == 1
    assert bell.refused == 999  # counted for the next line


# --- the registry: what is planted in it, and whose it is (issue 49) ----------------------------


def planted_registry(folder: Path) -> dict[str, Path]:
    """A registry holding what a command or another user could leave there: none of it an entry to read."""
    folder.mkdir(mode=0o700)
    planted = {name: folder / name for name in ("specific.fifo!", "specific.link!", "specific.huge!")}
    os.mkfifo(planted["specific.fifo!"])
    planted["specific.link!"].symlink_to("/dev/zero")
    with open(planted["specific.huge!"], "wb") as huge:
        huge.truncate(1 << 30)  # sparse: a gigabyte to read, none on disk
    if os.geteuid() == 0:
        planted["specific.other!"] = folder / "specific.other!"
        planted["specific.other!"].write_text(f"9 {os.getpid()} another-users-secret")
        os.chown(planted["specific.other!"], 65534, 65534)
    return planted


def test_what_is_planted_in_the_registry_neither_blocks_nor_stops_the_layer(tmp_path, caplog):
    import logging

    from conductor_site.channel_layer import NotAnEntry, _read_entry

    caplog.set_level(logging.WARNING, logger="conductor_site.channel_layer")
    folder = tmp_path / "channels.sqlite3-doorbells"
    planted = planted_registry(folder)

    async def main(layer, me):
        waiting = asyncio.ensure_future(receive(layer, me))
        await until((folder / layer.non_local_name(me)).exists)
        # Sends to channels whose entries are what was planted ring nothing and block nothing.
        for name in planted:
            await asyncio.wait_for(layer.send(f"{name}x", {"type": "nobody"}), GIVE_UP_SECONDS)
        await layer.send(me, {"type": "through"})
        return await waiting

    layer = doorbell_layer(AN_HOUR)
    layer._doorbell_folder = lambda: folder
    me = asyncio.run(layer.new_channel())
    assert asyncio.run(main(layer, me)) == {"type": "through"}  # rung: the poller waits an hour otherwise

    for path in planted.values():
        assert path.is_symlink() or path.exists()
        with pytest.raises(NotAnEntry):
            _read_entry(path)
    [skipped] = [r.getMessage() for r in caplog.records if "action=doorbell_registry_skipped" in r.getMessage()]
    assert f"entries={len(planted)}" in skipped


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_an_entry_of_another_user_is_not_read():
    from conductor_site.channel_layer import NotAnEntry, _read_entry

    folder = registry()
    folder.mkdir(mode=0o700, exist_ok=True)
    other = folder / f"specific.other{os.getpid()}!"
    other.write_text(f"9 {os.getpid()} another-users-secret")
    os.chown(other, 65534, 65534)
    try:
        with pytest.raises(NotAnEntry, match="owned by another user"):
            _read_entry(other)
    finally:
        other.unlink()


def test_the_layer_writes_its_entries_0600(tmp_path):
    from conductor_site.channel_layer import Entry, _read_entry, _write_entry

    folder = tmp_path / "registry"
    folder.mkdir(mode=0o700)
    (folder / ".specific.x!.{}".format(os.getpid())).symlink_to(tmp_path / "elsewhere")  # a planted staging name
    _write_entry(folder / "specific.x!", Entry(5000, os.getpid(), b"s" * 32))
    assert (folder / "specific.x!").stat().st_mode & 0o777 == 0o600
    assert _read_entry(folder / "specific.x!") == Entry(5000, os.getpid(), b"s" * 32)
    assert not (tmp_path / "elsewhere").exists()


@pytest.mark.parametrize("problem", ["writable by group or others", "owned by another user"])
def test_a_registry_folder_that_is_not_private_stops_the_start(tmp_path, monkeypatch, problem):
    from django.core.management import call_command
    from django.core.management.base import SystemCheckError

    from conductor_site import checks

    folder = tmp_path / "channels.sqlite3-doorbells"
    folder.mkdir()
    if problem == "writable by group or others":
        folder.chmod(0o777)
    elif os.geteuid() == 0:
        os.chown(folder, 65534, 65534)
    else:
        pytest.skip("giving a folder to another user needs root")
    monkeypatch.setattr(checks, "private_paths", lambda: [("the channel layer's doorbell registry", folder)])
    with pytest.raises(SystemCheckError, match=f"conductor_site.E001.*doorbell registry {folder} is {problem}"):
        call_command("check")
    if problem == "owned by another user":
        # Nor does a running layer register a doorbell in it (its pollers poll instead);
        # a folder of its own it narrows to 0700 first.
        from conductor_site.channel_layer import DoorbellSQLiteChannelLayer

        with pytest.raises(PermissionError, match=problem):
            DoorbellSQLiteChannelLayer._register(None, folder, "specific.x!", 5000, b"s" * 32)


def test_twenty_forged_rows_make_one_log_line_that_counts_them(caplog):
    import logging

    from conductor_site.channel_layer import DoorbellSQLiteChannelLayer

    caplog.set_level(logging.WARNING, logger="conductor_site.layer_messages")
    forger = DoorbellSQLiteChannelLayer(
        database="channels", capacity=1000, expiry=60, symmetric_encryption_keys=["not the installation's key"]
    )

    async def main(layer, me):
        for n in range(20):
            await forger.send(me, {"type": "forged", "n": n})
        await layer.send(me, {"type": "sealed"})
        return await receive(layer, me)

    layer = doorbell_layer(0.05)
    me = asyncio.run(layer.new_channel())
    assert asyncio.run(main(layer, me)) == {"type": "sealed"}
    lines = [r.getMessage() for r in caplog.records if "action=channel_message_refused" in r.getMessage()]
    assert len(lines) == 1 and "messages=20" in lines[0], lines


def test_a_server_with_junk_in_its_registry_starts_and_answers_healthz_and_a_hello(tmp_path):
    """The issue's FIFO: planted by hand, it once blocked the first hello's registration, /healthz with it."""
    import json

    import requests
    from websockets.sync.client import connect

    from tests.factories import TEST_TOKEN, PluginClientFactory
    from tests.server import running_server

    folder = registry()
    folder.mkdir(mode=0o700, exist_ok=True)
    junk = {kind: folder / f"specific.junk-{kind}-{os.getpid()}!" for kind in ("fifo", "link", "huge")}
    os.mkfifo(junk["fifo"])
    junk["link"].symlink_to(junk["fifo"])
    with open(junk["huge"], "wb") as huge:
        huge.truncate(1 << 30)
    PluginClientFactory(client_id="laptop-chrome")
    try:
        with running_server(tmp_path) as server:
            with connect(server.ws_url) as ws:
                ws.send(json.dumps({"type": "hello", "client_id": "laptop-chrome", "token": TEST_TOKEN}))
                assert json.loads(ws.recv(timeout=GIVE_UP_SECONDS))["type"] == "hello.ok"
                assert requests.get(f"{server.base_url}/healthz", timeout=10).status_code == 200
                ws.send(json.dumps({"type": "ping"}))
                assert json.loads(ws.recv(timeout=GIVE_UP_SECONDS)) == {"type": "pong"}
            assert "action=doorbell_registry_skipped" in server.log()  # the hello's poller read past the junk
    finally:
        for path in junk.values():
            path.unlink(missing_ok=True)


def test_a_group_send_counts_its_channels_pending_messages_in_one_statement_and_skips_a_full_one(monkeypatch):
    from channels_lite.layers.core import SQLiteChannelLayer

    from conductor_site.channel_layer import DoorbellSQLiteChannelLayer

    layer = DoorbellSQLiteChannelLayer(database="channels", capacity=2, expiry=60,
                                       symmetric_encryption_keys=settings.CHANNEL_LAYER_KEYS)
    asked = []
    counts = layer._pending_counts
    monkeypatch.setattr(layer, "_pending_counts", lambda names: asked.append(names) or counts(names))
    one_by_one = []  # channels-lite's count, one statement per channel (a send still asks it)
    per_channel = SQLiteChannelLayer._get_channel_pending_count
    monkeypatch.setattr(layer, "_get_channel_pending_count", lambda name: one_by_one.append(name) or per_channel(layer, name))

    async def main():
        members = [await layer.new_channel() for _ in range(5)] + ["plain.one", "plain.two"]
        for channel in members:
            await layer.group_add("team", channel)
        await layer.send("plain.two", {"type": "earlier"})
        await layer.send("plain.two", {"type": "earlier"})  # at capacity (2)
        one_by_one.clear()
        await layer.group_send("team", {"type": "news"})
        assert one_by_one == []
        received = [await receive(layer, channel) for channel in members[:6]]
        return members, received, await receive(layer, "plain.two"), await receive(layer, "plain.two")

    members, received, *earlier = asyncio.run(main())
    [names] = asked  # one statement for the seven channels: the process's own (one name) and two plain ones
    assert names == sorted({layer.non_local_name(members[0]), "plain.one", "plain.two"})
    assert received == [{"type": "news"}] * 6
    assert earlier == [{"type": "earlier"}] * 2  # plain.two was full: the news was dropped for it
