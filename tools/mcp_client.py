"""Calling an MCP server's tools through the official ``mcp`` SDK (SPEC §5.4).

No models here: an ``McpEndpoint`` says how to reach one server
(``tools/mcp_endpoint.py``; the ``mcp_servers`` app builds it from its row,
secrets resolved), and the two
verbs are ``mcp_tools_list`` (``tools/list``, every page) and
``mcp_tool_call`` (``tools/call``). Both are synchronous, for the
dispatcher's threads; the SDK's sessions live on one event loop thread per
process (``_Runner``), where a kept-alive session per server waits for the
next call.

Processes. A stdio server starts with ``shell.run``'s minimal environment
(``PATH``, ``LANG``; ``HOME``, ``XDG_CACHE_HOME`` and ``TMPDIR`` in folders of
its own outside the workspace, ``OwnFolders``: the home kept between sessions) plus its configured variables,
never the server's own environment. (The SDK adds the handful of variables
it always passes on, ``USER``, ``LOGNAME``, ``SHELL``, ``TERM``, which hold
no secret.) The SDK starts it in a process group of its own
(``start_new_session``) and, on close, signals the whole group: TERM, then
KILL. It starts as ``launcher.py exec``, which enters ``shell.run``'s sandbox
(see ``tools/shell.py``) and becomes the configured command: the server and
everything it starts run in a Landlock domain, so none of them can read the
environment or memory of the Conductor process that started it. Without
Landlock the launcher refuses, and the server's page says why. Its
stderr is drained and only its last lines kept, so a flooding server neither
blocks on a full pipe nor fills memory or the logs; they explain a server
that fails to start. It reads only the system's folders, the places its command line
names and those it may write in: the workspace, its own folders and its entry's
``writable`` ones (``tools/mcp_endpoint.py``).

A session that dies during a call (the process exited, the connection
dropped) fails that call as interrupted (``McpInterrupted``); one whose call
passes the timeout is closed, its process group killed, and the next call
starts a new one. A server that answers with a message the SDK cannot read
(a lone surrogate such as ``"\ud800"`` in its JSON, a result of the wrong
shape) is told apart from one that just went away (``McpUnreadable``): the
SDK logs such a message and drops it, which would leave the request waiting
for the whole timeout, so the session ends at once instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import secrets
import signal
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from core.kept_loop import KeptLoop, PerProcess
from core.logfmt import log_event
from tools.mcp_endpoint import McpEndpoint, sandboxed_argv, server_environment, server_folder, server_readable
from tools.mcp_processes import MARKER_VARIABLE, OwnFolders, StderrTail, child_with_marker
from tools.registry import ToolError, ToolRetryableError
from tools.workspace import workspace_root

if TYPE_CHECKING:
    from mcp.client.session import ClientSession

# The SDK (and httpx, pydantic, anyio below it) is imported when a session
# starts, not with this module: every Django process loads this module at
# start-up (the admin, the registry), and the SDK takes seconds to import on
# a busy machine, which every django-q2 worker and command would pay.

logger = logging.getLogger(__name__)

# How long a server may take to start and answer ``initialize``.
CONNECT_TIMEOUT_SECONDS = 30.0
# How much of why a server's message could not be read is told.
MAX_REASON_CHARS = 200
# The most pages of ``tools/list`` read, and tools kept, from one server: a
# server that keeps paging, or lists more, is cut there and the listing says so.
MAX_PAGES = 50
MAX_TOOLS = 1000
POLL_SECONDS = 0.1

T = TypeVar("T")


class McpUnavailable(ToolError):
    """The server could not be started or reached; nothing was called."""


class McpRefused(ToolError):
    """The server's URL reaches an address MCP servers may not be reached at (``tools/mcp_addresses.py``)."""


class McpInterrupted(ToolError):
    """The session died while a call was in flight: whether the tool ran is unknown."""


class McpUnreadable(McpInterrupted):
    """The server answered with a message the SDK could not read; the session was ended at once."""


class McpProtocolError(ToolError):
    """The server answered the request with an MCP error (an unknown tool, bad arguments)."""


class _Connection:
    """One live session with one server, owned by one task on the runner's loop.

    The SDK's context managers must be entered and left in the same task, so
    ``run`` holds them open until ``close`` and calls come from other tasks.
    """

    def __init__(self, endpoint: McpEndpoint, workspace: Path) -> None:
        self.endpoint = endpoint
        self.workspace = workspace
        self.session: ClientSession | None = None
        self.ready = asyncio.Event()
        self.closing = asyncio.Event()
        self.gone = asyncio.Event()
        self.error: BaseException | None = None
        # Why an answer of the server could not be read ("" while all could).
        self.unreadable = ""
        self.stderr: StderrTail | None = None
        self.folders: OwnFolders | None = None
        self.task: asyncio.Task | None = None
        # A stdio server's process group (its pid: the SDK starts it with
        # start_new_session), found by the marker in its environment.
        self.marker = secrets.token_hex(8)
        self.process_group: int | None = None

    @property
    def is_alive(self) -> bool:
        return self.session is not None and not self.gone.is_set() and not self.closing.is_set()

    def _transport(self):
        from mcp.client.stdio import StdioServerParameters, stdio_client

        from tools.mcp_http import mcp_http_client

        endpoint = self.endpoint
        if endpoint.is_stdio:
            self.stderr = StderrTail()
            self.folders = OwnFolders(endpoint.home)
            folder = server_folder(endpoint, self.workspace)
            writable = (workspace_root(self.workspace), *self.folders.writable)
            env = server_environment(endpoint, self.workspace, self.folders.environment())
            readable = server_readable(endpoint, self.workspace, env)
            return stdio_client(
                StdioServerParameters(
                    command=sys.executable, args=sandboxed_argv(endpoint, writable, readable), cwd=folder,
                    env={**env, MARKER_VARIABLE: self.marker},
                ),
                errlog=self.stderr.writer,
            )
        client = mcp_http_client(headers=dict(endpoint.headers), allow_private=endpoint.allow_private_urls)
        return _http_transport(endpoint.url, client)

    async def run(self) -> None:
        import anyio
        from mcp.client.session import ClientSession

        try:
            async with contextlib.AsyncExitStack() as stack:
                streams = await stack.enter_async_context(self._transport())
                session = await stack.enter_async_context(
                    ClientSession(*streams[:2], message_handler=self._on_message)
                )
                with anyio.fail_after(CONNECT_TIMEOUT_SECONDS):
                    await session.initialize()
                if self.endpoint.is_stdio:
                    self.process_group = child_with_marker(self.marker)
                self.session = session
                self.ready.set()
                await self.closing.wait()
        except BaseException as exc:  # noqa: BLE001 - kept for the caller, whatever it was
            self.error = exc
        finally:
            # The SDK kills the group only when the server outlives its closed
            # stdin; a server that exits leaves its children running. They go now.
            if self.process_group is not None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(self.process_group, signal.SIGKILL)
            # Before gone: a caller that returns then may end the process, and this thread with it.
            if self.folders is not None:
                self.folders.remove()
            self.gone.set()
            self.ready.set()
            if self.stderr is not None:
                self.stderr.close()

    async def _on_message(self, message: Any) -> None:
        """The SDK's message handler: an answer it could not read ends the session at once.

        The SDK hands over what its transport could not read as an exception,
        after dropping it; a request that answer was for would otherwise wait
        for the whole timeout. Lines that are no message at all (a server
        printing a banner on stdout) are left as the SDK leaves them.
        """
        if not isinstance(message, Exception) or self.unreadable:
            return
        reason = unreadable_answer(message)
        if not reason:
            return
        self.unreadable = reason
        log_event(logger, "mcp_answer_unreadable", level=logging.WARNING, server=self.endpoint.name, reason=reason)
        if self.session is None and self.task is not None:
            self.task.cancel()  # still in initialize, which the closing event does not interrupt
        else:
            self.closing.set()

    def why_gone(self) -> str:
        """What ended the session, in one line, with the last words of the server's stderr."""
        error = self.error
        while isinstance(error, BaseExceptionGroup) and error.exceptions:
            error = error.exceptions[0]
        if self.unreadable:
            reason = f"it answered with a message that is not valid JSON-RPC: {self.unreadable}"
        elif error is None:
            reason = "the session ended"
        elif isinstance(error, TimeoutError):
            reason = f"no answer to initialize within {CONNECT_TIMEOUT_SECONDS:g} s"
        else:
            reason = f"{type(error).__name__}: {error}".strip().rstrip(":")
        tail = self.stderr.text() if self.stderr is not None else ""
        return f"{reason}; stderr: {tail}" if tail else reason


def unreadable_answer(exc: Exception) -> str:
    """Why the SDK could not read an answer (a JSON object with an ``id`` and no ``method``); "" for anything else.

    The SDK's parse error carries what it was given: the line's text when it
    is not JSON the SDK's parser takes (which Python's own parser may still
    read: a lone surrogate), else the parsed object.
    """
    from pydantic import ValidationError

    if not isinstance(exc, ValidationError):
        return ""
    errors = exc.errors(include_url=False)
    for error in errors:
        sent = error.get("input")
        if isinstance(sent, str):
            try:
                sent = json.loads(sent)
            except ValueError:
                continue
        if isinstance(sent, dict) and "jsonrpc" in sent:
            if "id" not in sent or "method" in sent:
                return ""  # a notification or a request of the server's: not an answer anyone waits for
            first = errors[0]
            where = ".".join(str(part) for part in first.get("loc", ()))
            reason = first["msg"] if first["type"] == "json_invalid" else f"{first['msg']} at {where or 'the top'}"
            return reason[:MAX_REASON_CHARS]
    return ""


@contextlib.asynccontextmanager
async def _http_transport(url: str, client):
    from mcp.client.streamable_http import streamable_http_client

    async with client, streamable_http_client(url, http_client=client) as streams:
        yield streams


class _Runner(KeptLoop):
    """The process's event loop thread and its kept-alive connections, by endpoint."""

    def __init__(self) -> None:
        super().__init__("mcp-runner")
        self.connections: dict[tuple[McpEndpoint, Path], _Connection] = {}
        self.lock = threading.Lock()


_runners = PerProcess(_Runner)


def _the_runner() -> _Runner:
    """This process's runner; a forked child (a django-q2 worker) starts its own."""
    return _runners.get()


async def _connect(endpoint: McpEndpoint, workspace: Path) -> _Connection:
    if not endpoint.is_stdio and not endpoint.allow_private_urls:
        from tools.mcp_http import url_resolved_refusal

        # Also checked at each connection (tools/mcp_http.py); here first, to say so before any request,
        # and for a proxy from the environment, which connects in its place.
        reason = await url_resolved_refusal(endpoint.url)
        if reason:
            raise McpRefused(f"MCP server {endpoint.name!r} was not reached: {reason}")
    connection = _Connection(endpoint, workspace)
    connection.task = asyncio.get_running_loop().create_task(connection.run())
    await connection.ready.wait()
    if connection.session is None:
        failed = "did not start" if endpoint.is_stdio else "did not answer initialize"
        raise McpUnavailable(f"MCP server {endpoint.name!r} {failed}: {connection.why_gone()}")
    return connection


async def _close(connection: _Connection) -> None:
    connection.closing.set()
    await connection.gone.wait()


async def _connection_for(runner: _Runner, endpoint: McpEndpoint, workspace: Path) -> _Connection:
    key = (endpoint, workspace)
    connection = runner.connections.get(key)
    if connection is not None and connection.is_alive:
        return connection
    if connection is not None:
        log_event(logger, "mcp_session_restart", level=logging.WARNING, server=endpoint.name,
                  reason=connection.why_gone())
    connection = await _connect(endpoint, workspace)
    runner.connections[key] = connection
    return connection


async def _with_session(
    endpoint: McpEndpoint, workspace: Path, keep_alive: bool,
    work: Callable[[ClientSession], Awaitable[T]], holder: list[_Connection],
) -> T:
    runner = _the_runner()
    if keep_alive:
        connection = await _connection_for(runner, endpoint, workspace)
    else:
        connection = await _connect(endpoint, workspace)
    holder.append(connection)
    try:
        return await _until_gone(connection, work(connection.session))
    finally:
        if not keep_alive:
            await _close(connection)


async def _until_gone(connection: _Connection, request: Awaitable[T]) -> T:
    """``request``'s answer, or ``McpInterrupted`` as soon as the session dies under it."""
    from mcp.shared.exceptions import MCPError
    from mcp_types.jsonrpc import CONNECTION_CLOSED

    request_task = asyncio.ensure_future(request)
    gone_task = asyncio.ensure_future(connection.gone.wait())
    try:
        await asyncio.wait({request_task, gone_task}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone_task.cancel()
    if request_task.done():
        try:
            return request_task.result()
        except MCPError as exc:
            if exc.error.code != CONNECTION_CLOSED:
                raise
            # The SDK's answer to every request in flight when the stream ended.
            connection.closing.set()
    else:
        request_task.cancel()
        # Its own "Connection closed" may land before the cancel; it is read here.
        request_task.add_done_callback(lambda task: task.cancelled() or task.exception())
    if connection.unreadable:
        raise McpUnreadable(
            f"the MCP server {connection.endpoint.name!r} answered with a message that is not valid JSON-RPC "
            f"({connection.unreadable}); the session was closed"
        )
    raise McpInterrupted(
        f"interrupted: the MCP server {connection.endpoint.name!r} went away during the call "
        f"({connection.why_gone()})"
    )


def _run_sync(
    endpoint: McpEndpoint, *, workspace: Path, keep_alive: bool, timeout: float,
    work: Callable[[ClientSession], Awaitable[T]], cancelled: threading.Event | None, what: str,
) -> T:
    """Run ``work`` with a session of ``endpoint`` from a synchronous caller, within ``timeout`` seconds.

    At the timeout or on a cancel, the session is closed (its process group
    killed) so the next call starts afresh, and a ``ToolError`` says why.
    """
    runner = _the_runner()
    holder: list[_Connection] = []
    future = runner.submit(_with_session(endpoint, workspace, keep_alive, work, holder))
    # The timeout counts from when the session is ready: starting a server
    # (an npm package, an interpreter) has its own limit, CONNECT_TIMEOUT_SECONDS.
    deadline = time.monotonic() + CONNECT_TIMEOUT_SECONDS + POLL_SECONDS * 10
    is_ready = False
    while True:
        if not is_ready and holder:
            is_ready = True
            deadline = time.monotonic() + timeout
        try:
            return future.result(POLL_SECONDS)
        except TimeoutError:
            pass
        except ToolError:
            raise
        except Exception as exc:
            raise _protocol_error(exc, endpoint) from exc
        stopping = cancelled is not None and cancelled.is_set()
        if stopping or time.monotonic() >= deadline:
            future.cancel()
            for connection in holder:
                runner.submit(_close(connection))
            log_event(logger, "mcp_call_stopped", level=logging.WARNING, server=endpoint.name, what=what,
                      reason="cancelled" if stopping else "timeout")
            if stopping:
                raise ToolError(f"cancelled; the MCP server {endpoint.name!r} was stopped")
            raise ToolError(
                f"timed out after {timeout:g} s; the MCP server {endpoint.name!r} was stopped "
                "(its process group killed) and restarts on the next call"
            )


def _protocol_error(exc: Exception, endpoint: McpEndpoint) -> ToolError:
    message = str(exc).strip() or type(exc).__name__
    return McpProtocolError(f"MCP server {endpoint.name!r} refused the request: {message}")


@dataclass(frozen=True)
class McpToolListing:
    """What ``tools/list`` gave: the tools as wire JSON, and why the list was cut ("" when it was not)."""

    tools: list[dict[str, Any]]
    cut: str = ""


def mcp_tools_list(endpoint: McpEndpoint, *, workspace: Path, keep_alive: bool = True) -> McpToolListing:
    """Every tool the server lists (``tools/list``, following ``nextCursor``), as wire JSON.

    Each entry has ``name``, and when the server gives them ``description``,
    ``inputSchema`` and ``annotations``. At most ``MAX_PAGES`` pages and
    ``MAX_TOOLS`` tools are kept; past either, ``cut`` says so. Raises
    ``ToolError`` when the server cannot be reached or answers with an error.
    """

    async def work(session: ClientSession) -> McpToolListing:
        from mcp_types import PaginatedRequestParams

        listed: list[dict[str, Any]] = []
        cursor = None
        for _ in range(MAX_PAGES):
            params = PaginatedRequestParams(cursor=cursor) if cursor else None
            page = await session.list_tools(params=params)
            room = MAX_TOOLS - len(listed)
            listed += [tool.model_dump(by_alias=True, mode="json", exclude_none=True) for tool in page.tools[:room]]
            if len(page.tools) > room:
                return McpToolListing(listed, f"the server lists more than {MAX_TOOLS} tools; the first "
                                              f"{MAX_TOOLS} are kept")
            cursor = page.next_cursor
            if not cursor:
                return McpToolListing(listed)
        return McpToolListing(listed, f"the server still had pages after {MAX_PAGES}; the {len(listed)} "
                                      f"tools on them are kept")

    return _run_sync(endpoint, workspace=workspace, keep_alive=keep_alive, timeout=endpoint.timeout_seconds,
                     work=work, cancelled=None, what="tools/list")


def mcp_tool_call(
    endpoint: McpEndpoint, *, tool: str, arguments: dict[str, Any], workspace: Path,
    cancelled: threading.Event | None = None, keep_alive: bool = True, is_idempotent: bool = False,
) -> dict[str, Any]:
    """Call ``tool`` with ``arguments``; the ``CallToolResult`` as wire JSON (``content``, ``isError``...).

    Raises ``McpUnavailable`` (not started: nothing ran, worth a retry),
    ``McpInterrupted`` (the session died mid-call: retryable only for an
    idempotent tool), ``McpProtocolError``, or ``ToolError`` on a timeout or cancel.
    """

    async def work(session: ClientSession) -> dict[str, Any]:
        result = await session.call_tool(tool, arguments)
        return result.model_dump(by_alias=True, mode="json", exclude_none=True)

    started = time.monotonic()
    try:
        result = _run_sync(endpoint, workspace=workspace, keep_alive=keep_alive, timeout=endpoint.timeout_seconds,
                           work=work, cancelled=cancelled, what="tools/call")
    except McpUnavailable as exc:
        raise ToolRetryableError(str(exc)) from exc
    except McpInterrupted as exc:
        if is_idempotent:
            raise ToolRetryableError(f"{exc}; the tool is idempotent, so it runs again") from exc
        raise ToolError(f"{exc}; not re-run") from exc
    log_event(logger, "mcp_call", server=endpoint.name, tool=tool,
              duration_ms=round((time.monotonic() - started) * 1000), is_error=bool(result.get("isError")))
    return result


def mcp_sessions_close() -> None:
    """Close this process's kept-alive sessions (their servers stop). For tests and shutdown."""
    runner = _runners.current()
    if runner is None:
        return
    connections = list(runner.connections.values())
    runner.connections.clear()
    for connection in connections:
        with contextlib.suppress(Exception):
            runner.submit(_close(connection)).result(10)
