"""The embedded channel layer: channels-lite's SQLite layer, with a doorbell.

channels-lite's receivers poll the database for their process's channels. A
poll often enough for a quick delivery (every 20 ms) keeps every receiving
process busy, idle or not. Here a receiving process's poller sleeps instead,
for up to ``doorbell_fallback_interval``, and whoever sends it a message rings
its doorbell once the message is committed: one datagram to a UDP port on the
loopback interface. Each poller registers its port in a folder beside the
layer's database (``<database>-doorbells/<channel prefix>``, holding the port,
the pid and the doorbell's secret), so every process on that database (several
servers and clusters) can find it; it unregisters when it ends, and a process
that registers removes what dead processes left behind.

Who may ring: any local user can send datagrams to a loopback port, and each
ring costs the poller a read of the database. A ring is therefore the
doorbell's secret (random, made when it opens, readable only through the
private registry folder); any other datagram is dropped before it wakes
anything. On Linux the kernel drops it (a socket filter comparing the
datagram with the secret, ``doorbell_filter``), so a flood costs the
receiving process nothing; elsewhere, or if the kernel refuses the filter,
``datagram_received`` drops it and counts it in a ``doorbell_refused`` line at
most once a minute.

What a message says is checked apart from the ring: messages are sealed with
the installation's key (``conductor_site.layer_messages``), so a row written
straight into the layer's database is dropped, not dispatched.

Why no message waits: the poller clears its bell, reads the database, and
only then sleeps. A message committed before the read is found by it; one
committed after is rung after its commit, and a ring sets the bell whether or
not the poller sleeps yet, so the sleep ends at once. What a ring cannot
reach (a datagram lost, a sender that does not ring, such as a plain
channels-lite layer) the fallback poll finds within its interval.

Only process-specific channels (``new_channel()``, the only kind Conductor
receives on) have a doorbell; a receiver of a general channel polls every
``polling_interval``, as in channels-lite.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import errno
import functools
import hmac
import logging
import os
import random
import secrets
import select
import socket
import stat
import struct
import time
from collections.abc import Iterable
from datetime import timedelta
from pathlib import Path
from typing import NamedTuple

from asgiref.sync import sync_to_async
from channels_lite.layers import BoundedQueue, ChannelEmpty
from channels_lite.layers.core import SQLiteChannelLayer
from channels_lite.models import Event, GroupMembership
from django.conf import settings
from django.db.models import Count
from django.utils import timezone

from conductor_site.layer_messages import RefusesForgedMessages
from conductor_site.private_files import not_private, private_folder
from core.logfmt import CountedLines, log_event

logger = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"
# At most one doorbell_refused line per doorbell in this many seconds, however many datagrams.
REFUSED_LOG_INTERVAL_SECONDS = 60.0
# Linux's <asm-generic/socket.h>; Python's socket module names neither.
SO_ATTACH_FILTER, SO_DETACH_FILTER = 26, 27
UDP_HEADER_BYTES = 8  # a UDP socket's filter sees the datagram from its UDP header on
# An entry is "PORT PID SECRET": 5 + 1 + 10 + 1 + 32 characters; anything much longer is not one.
ENTRY_MAX_BYTES = 256


def doorbell_filter(secret: bytes) -> bytes:
    """A classic BPF program that accepts a datagram whose payload is ``secret`` and drops any other.

    The program's instructions (``struct sock_filter``): the length first,
    then the secret four bytes at a time, each mismatch jumping to the drop.
    """
    if len(secret) % 4:
        raise ValueError("the secret's length must be a multiple of 4")
    words = [int.from_bytes(secret[at : at + 4], "big") for at in range(0, len(secret), 4)]
    load_len, load_word, jump_equal, ret = 0x80, 0x20, 0x15, 0x06
    program = [(load_len, 0, 0, 0), (jump_equal, 0, 2 * len(words) + 1, UDP_HEADER_BYTES + len(secret))]
    for n, word in enumerate(words):
        left = len(words) - n - 1
        program += [(load_word, 0, 0, UDP_HEADER_BYTES + 4 * n), (jump_equal, 0, 2 * left + 1, word)]
    program += [(ret, 0, 0, 0xFFFF), (ret, 0, 0, 0)]  # accept, drop
    return b"".join(struct.pack("HBBI", *instruction) for instruction in program)


def _attach_filter(sock: socket.socket, secret: bytes) -> bool:
    """Let the kernel drop what is not ``secret`` on ``sock``; False where it cannot (not Linux).

    Checked by ringing the socket once: a kernel that reads the program
    differently (dropping the ring) gets it detached again.
    """
    code = ctypes.create_string_buffer(doorbell_filter(secret))  # the kernel copies it
    program = struct.pack("HL", len(code.raw) // 8, ctypes.addressof(code))
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, program)
    except OSError:
        return False
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as ringer:
        ringer.sendto(secret, sock.getsockname())
    if select.select([sock], [], [], 1.0)[0] and sock.recv(len(secret) + 1) == secret:
        return True
    sock.setsockopt(socket.SOL_SOCKET, SO_DETACH_FILTER, 0)
    return False


def doorbell_socket(secret: bytes) -> socket.socket:
    """A UDP socket on the loopback for a doorbell rung by ``secret``, filtered by the kernel where it can be."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        sock.bind((LOOPBACK, 0))
        if not _attach_filter(sock, secret):
            log_event(
                logger, "doorbell_unfiltered", level=logging.INFO,
                reason="no kernel socket filter here; other datagrams are dropped by the process",
            )
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


def new_secret() -> bytes:
    """A doorbell's secret: 32 random hex digits (a length ``doorbell_filter`` takes)."""
    return secrets.token_hex(16).encode()


class Doorbell(asyncio.DatagramProtocol):
    """The receiving end of a doorbell: a datagram that is its ``secret`` sets ``rung``; any other is dropped."""

    def __init__(self, prefix: str = "", secret: bytes | None = None) -> None:
        self.prefix = prefix
        self.secret = secret or new_secret()
        self.rung = asyncio.Event()
        self.transport: asyncio.DatagramTransport | None = None
        self._refusals = CountedLines(REFUSED_LOG_INTERVAL_SECONDS)

    @property
    def refused(self) -> int:
        """Datagrams refused since the last ``doorbell_refused`` line."""
        return self._refusals.pending

    def connection_made(self, transport) -> None:
        self.transport = transport

    def datagram_received(self, data: bytes, addr) -> None:
        if hmac.compare_digest(data, self.secret):
            self.rung.set()
            return
        # Kept as cheap as a flood needs: a count, and a line once a minute.
        if (count := self._refusals.add()) is not None:
            log_event(
                logger, "doorbell_refused", level=logging.WARNING, prefix=self.prefix, datagrams=count,
                sender=f"{addr[0]}:{addr[1]}" if addr else None, reason="not this doorbell's secret",
            )

    def error_received(self, exc: Exception) -> None:
        pass  # nothing is sent on this socket; a stray error changes nothing

    @property
    def port(self) -> int:
        return self.transport.get_extra_info("sockname")[1]

    async def wait(self, timeout: float) -> None:
        """Until the bell rings or ``timeout`` seconds pass, whichever comes first."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self.rung.wait()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


def doorbell_folder(database_name: str) -> Path | None:
    """Where the receivers on the SQLite database ``database_name`` register; None for an in-memory one."""
    if not database_name or database_name == ":memory:" or database_name.startswith("file:"):
        return None
    return Path(f"{database_name}-doorbells")


def _is_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


class Entry(NamedTuple):
    """A registered doorbell: where it listens, whose it is, and what rings it (b"" in an entry without one)."""

    port: int
    pid: int
    secret: bytes


def _read_entry(path: Path) -> Entry:
    """A registry entry; raises OSError or ValueError when there is none, or it is not one this user wrote.

    Whatever else sits in the folder is read without blocking and never
    followed: a FIFO or a device is opened without waiting for a writer and
    refused unread, a symlink is not opened, a file of another user or
    larger than an entry can be is refused (``NotAnEntry``).
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise NotAnEntry(f"{path.name}: a symbolic link") from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotAnEntry(f"{path.name}: not a regular file")
        if info.st_uid != os.geteuid():
            raise NotAnEntry(f"{path.name}: owned by another user (uid {info.st_uid})")
        if info.st_size > ENTRY_MAX_BYTES:
            raise NotAnEntry(f"{path.name}: {info.st_size} bytes, more than an entry")
        text = os.read(fd, ENTRY_MAX_BYTES + 1).decode("ascii")
    finally:
        os.close(fd)
    port, pid, *secret = text.split()
    return Entry(int(port), int(pid), secret[0].encode() if secret else b"")


def _write_entry(path: Path, entry: Entry) -> None:
    """Write ``entry`` at ``path``, 0600, whole: written beside it, then renamed into place.

    A sender never reads half an entry, and a name planted where the staging
    file goes (a symlink, a FIFO) is replaced, never followed.
    """
    staging = path.with_name(f".{path.name}.{os.getpid()}")
    with contextlib.suppress(FileNotFoundError):
        staging.unlink()
    fd = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w") as file:
        file.write(f"{entry.port} {entry.pid} {entry.secret.decode()}")
    os.replace(staging, path)


class NotAnEntry(ValueError):
    """Something in the registry folder that is not an entry this user wrote: skipped."""


class DoorbellSQLiteChannelLayer(RefusesForgedMessages, SQLiteChannelLayer):
    """channels-lite's ``SQLiteChannelLayer`` whose pollers sleep until rung, with sealed messages
    (see the module docstring)."""

    def __init__(self, *, doorbell_fallback_interval: float = 1.0, **kwargs) -> None:
        super().__init__(**kwargs)
        self.doorbell_fallback_interval = doorbell_fallback_interval
        self._ringer = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._ringer.setblocking(False)

    # --- sending: ring after the commit -----------------------------------------

    async def send(self, channel, message, expiry=None):
        await super().send(channel, message, expiry=expiry)
        self._ring([channel])

    async def group_send(self, group, message):
        # channels-lite 0.4.0's group_send, which keeps the channels it sent to
        # to itself: the same steps, then a ring for those channels.
        assert isinstance(message, dict), "Message is not a dict"
        self.require_valid_group_name(group)
        channels = await self._group_channels(group)
        if not channels:
            return
        expiry = timezone.now() + timedelta(seconds=self.expiry)
        events = [
            Event(channel_name=channel_name, data=data, expires_at=expiry)
            async for channel_name, data in self._prepare_group_send_events(channels, message)
        ]
        if events:
            await self._execute_with_retry(lambda: Event.objects.abulk_create(events))
            self._ring(event.channel_name for event in events)

    async def _prepare_group_send_events(self, channels, message):
        # channels-lite's steps, with one statement for every channel's pending
        # count rather than one (and a thread hop) per channel: a group of a
        # team's twenty sockets cost twenty. A channel at capacity is skipped,
        # its message dropped, as the channel layer spec says.
        names = {channel: self.non_local_name(channel) if "!" in channel else channel for channel in channels}
        pending = await self._pending_counts(sorted(set(names.values()))) if self.enforce_capacity else {}
        for channel, name in names.items():
            if self.enforce_capacity and pending.get(name, 0) >= self.get_capacity(channel):
                continue
            yield name, self.serialize({**message, "__asgi_channel__": channel} if "!" in channel else message)

    @sync_to_async
    def _pending_counts(self, names: list[str]) -> dict[str, int]:
        """The undelivered, unexpired messages of each of the channels ``names`` (those with none left out)."""
        return dict(
            Event.objects.filter(channel_name__in=names, delivered=False, expires_at__gte=timezone.now())
            .order_by().values("channel_name").annotate(pending=Count("pk")).values_list("channel_name", "pending")
        )

    @sync_to_async
    def _group_channels(self, group: str) -> list[str]:
        return list(
            GroupMembership.objects.filter(group_name=group, expires_at__gte=timezone.now())
            .values_list("channel_name", flat=True)
        )

    def _ring(self, channels: Iterable[str]) -> None:
        """Ring the doorbell of each process-specific channel's receiver, if it has one.

        Best effort: a receiver without a registered doorbell (its poller
        has not started, or ended) or a lost datagram leaves the message to
        the receiver's next poll.
        """
        folder = self._doorbell_folder()
        if folder is None:
            return
        for prefix in {self.non_local_name(channel) for channel in channels if "!" in channel}:
            try:
                entry = _read_entry(folder / prefix)
                if entry.secret:  # an entry without one was left by a version that took any datagram
                    self._ringer.sendto(entry.secret, (LOOPBACK, entry.port))
            except (OSError, ValueError):
                pass

    def _doorbell_folder(self) -> Path | None:
        # Read at each use: a test run switches the database to its test file
        # after the layer may have been made.
        return doorbell_folder(str(settings.DATABASES[self.database]["NAME"]))

    # --- receiving: a poller that sleeps until rung ------------------------------

    async def _receive_single_from_db(self, channel):
        # channels-lite marks a message delivered, then decodes it: one that
        # cannot be opened is dropped (and counted), and the next one is read.
        return await self._skipping_refused(functools.partial(super()._receive_single_from_db, channel))

    async def _poll_and_distribute(self, prefix):
        """channels-lite's poller for ``prefix``, sleeping on the doorbell between empty polls.

        As in channels-lite, it ends after ``polling_idle_timeout`` seconds
        without receivers or messages, and survives database errors.
        """
        bell = await self._doorbell_open(prefix)
        interval = self.doorbell_fallback_interval if bell else self.polling_interval
        last_activity = time.monotonic()
        try:
            while self._active_receivers[prefix] or time.monotonic() - last_activity <= self.polling_idle_timeout:
                if bell:
                    bell.rung.clear()  # before the read: a ring from now on means a message to read
                try:
                    channel, message = await self._execute_with_retry(
                        lambda: self._receive_single_from_db(prefix)
                    )
                except ChannelEmpty:
                    if self.auto_trim and random.random() < 0.01:
                        await self.clean_expired()
                    if bell:
                        await bell.wait(interval)
                    else:
                        await asyncio.sleep(interval)
                    continue
                except Exception:
                    log_event(logger, "channel_poll_failed", level=logging.ERROR, exc_info=True, prefix=prefix)
                    await asyncio.sleep(max(interval, self.polling_interval))
                    continue
                buffer = self.receive_buffer.get(channel)
                if buffer is None:
                    buffer = self.receive_buffer[channel] = BoundedQueue(maxsize=self.get_capacity(channel))
                await buffer.put(message)
                last_activity = time.monotonic()
            # Idle for long with nobody receiving: forget this prefix, as channels-lite does.
            for channel in [name for name in self.receive_buffer if name.startswith(prefix)]:
                del self.receive_buffer[channel]
            self._active_receivers.pop(prefix, None)
            self._polling_locks.pop(prefix, None)
        finally:
            self._polling_tasks.pop(prefix, None)
            if bell:
                self._doorbell_close(prefix, bell)

    async def _doorbell_open(self, prefix: str) -> Doorbell | None:
        """A doorbell for ``prefix``, bound and registered; None (poll instead) when there can be none."""
        folder = self._doorbell_folder()
        if folder is None:
            return None
        secret = new_secret()
        try:
            _, bell = await asyncio.get_running_loop().create_datagram_endpoint(
                lambda: Doorbell(prefix, secret), sock=doorbell_socket(secret)
            )
        except OSError:
            log_event(
                logger, "doorbell_unavailable", level=logging.WARNING, exc_info=True, prefix=prefix,
                reason=f"cannot bind {LOOPBACK}", polling_every_s=self.polling_interval,
            )
            return None
        try:
            # Off the event loop: the folder may hold many entries, or what a
            # slow disk takes long to read; the loop serves every socket.
            await asyncio.to_thread(self._register, folder, prefix, bell.port, bell.secret)
        except OSError:
            log_event(
                logger, "doorbell_unavailable", level=logging.WARNING, exc_info=True, prefix=prefix,
                reason=f"cannot register it in {folder}", polling_every_s=self.polling_interval,
            )
            bell.close()
            return None
        return bell

    def _register(self, folder: Path, prefix: str, port: int, secret: bytes) -> None:
        """Register this process's doorbell for ``prefix`` in ``folder``; removes dead processes' entries.

        The folder is private (0700, this user's): only this user's processes
        read the secrets. One that is not (``not_private``) is refused
        (``OSError``): the caller polls instead. What is in it but is no
        entry of this user's is skipped, said in one ``doorbell_registry_skipped`` line.
        """
        private_folder(folder)
        if (problem := not_private(folder)) is not None:
            raise PermissionError(f"the doorbell registry {folder} {problem}")
        skipped = []
        for path in folder.iterdir():
            try:
                pid = _read_entry(path).pid
            except NotAnEntry as exc:
                skipped.append(str(exc))
                continue
            except (OSError, ValueError):
                continue  # gone meanwhile, being written, or not an entry's text
            if pid != os.getpid() and not _is_alive(pid):
                with contextlib.suppress(OSError):
                    path.unlink(missing_ok=True)
        if skipped:
            log_event(
                logger, "doorbell_registry_skipped", level=logging.WARNING, folder=str(folder),
                entries=len(skipped), first="; ".join(skipped[:3]), reason="not an entry this user wrote",
            )
        _write_entry(folder / prefix, Entry(port, os.getpid(), secret))

    def _doorbell_close(self, prefix: str, bell: Doorbell) -> None:
        bell.close()
        folder = self._doorbell_folder()
        if folder is not None:
            with contextlib.suppress(OSError):
                (folder / prefix).unlink(missing_ok=True)
