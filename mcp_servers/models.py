"""MCP servers an operator configured, and the tools each one listed (SPEC §5.4)."""

from __future__ import annotations

import os
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator, RegexValidator
from django.db import models

from tools.mcp_addresses import url_refusal

TARGET_NAME = r"^[a-z][a-z0-9_-]*\Z"
RESERVED_TARGETS = ("conductor",)


class McpServer(models.Model):
    """One server, reached by a stdio command or a Streamable HTTP URL; its name is the block's target.

    ``secret_env`` and ``secret_headers`` hold the variables and headers as
    one encrypted JSON object each (``mcp_servers.secrets``); only their
    names are kept in the clear (``env_names``, ``header_names``), to show.
    """

    class Transport(models.TextChoices):
        STDIO = "stdio", "stdio command"
        HTTP = "http", "Streamable HTTP"

    class Source(models.TextChoices):
        ADMIN = "admin", "admin"
        FILE = "file", "CONDUCTOR_MCP_SERVERS"  # rewritten from the file on each sync

    name = models.CharField(
        max_length=64, unique=True,
        validators=[RegexValidator(TARGET_NAME, "a target name: [a-z][a-z0-9_-]*")],
        help_text="The target blocks name: NAME::tool.",
    )
    transport = models.CharField(max_length=8, choices=Transport.choices, default=Transport.STDIO)
    command = models.CharField(max_length=1000, blank=True, help_text="stdio: the program to start.")
    args = models.JSONField(default=list, blank=True, help_text="stdio: its arguments, a JSON list of strings.")
    cwd = models.CharField(
        max_length=1000, blank=True,
        help_text="stdio: the folder it runs in; relative to the workspace; empty: the workspace.",
    )
    writable = models.JSONField(
        default=list, blank=True,
        help_text="stdio: folders it may write in besides the workspace and its own home, "
        "a JSON list of absolute paths, e.g. [\"/srv/notes\"].",
    )
    url = models.URLField(max_length=1000, blank=True, help_text="Streamable HTTP: the endpoint URL.")
    secret_env = models.TextField(blank=True, default="")
    env_names = models.JSONField(default=list, blank=True)
    secret_headers = models.TextField(blank=True, default="")
    header_names = models.JSONField(default=list, blank=True)
    enabled = models.BooleanField(default=True)
    timeout_seconds = models.PositiveIntegerField(
        default=60, validators=[MinValueValidator(1)],
        help_text="A call's timeout, at most CONDUCTOR_MCP_MAX_TIMEOUT_SECONDS.",
    )
    source = models.CharField(max_length=8, choices=Source.choices, default=Source.ADMIN)
    tools_listed_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True, default="", help_text="Why the last listing failed; empty when it worked.")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "MCP server"
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        """A URL to a loopback, link-local or private address is refused unless the setting allows it.

        Only what the URL says is checked here (a literal address,
        ``localhost``); where a name resolves to is checked at each connection.
        """
        refused = self.transport == self.Transport.HTTP and self.url and url_host_refusal(self.url)
        if refused:
            raise ValidationError({"url": refused})
        if problem := writable_problem(self.writable):
            raise ValidationError({"writable": problem})


def writable_problem(writable: object) -> str:
    """Why ``writable`` cannot be a server's extra writable folders ("" when it can): a list of absolute
    paths, none of them the data folder, in it or around it (the databases and the key are there)."""
    if not isinstance(writable, list) or not all(isinstance(path, str) for path in writable):
        return 'a JSON list of absolute paths, e.g. ["/srv/notes"]'
    data = Path(settings.DATA_DIR).resolve()
    for path in writable:
        if not path.startswith("/"):
            return f"{path!r} is not an absolute path"
        real = Path(os.path.realpath(path))
        if real == data or data in real.parents or real in data.parents:
            return f"{path!r} is the data folder, in it or around it: the server's databases and key are there"
    return ""


def url_host_refusal(url: str) -> str:
    """Why ``url`` may not be a server's ("" when it may), by ``CONDUCTOR_MCP_ALLOW_PRIVATE_URLS``."""
    return "" if settings.CONDUCTOR_MCP_ALLOW_PRIVATE_URLS else url_refusal(url)


class McpTool(models.Model):
    """A tool as its server listed it at ``server.tools_listed_at``."""

    server = models.ForeignKey(McpServer, on_delete=models.CASCADE, related_name="tools")
    name = models.CharField(max_length=128)
    description = models.TextField(blank=True, default="")
    input_schema = models.JSONField(default=dict)
    annotations = models.JSONField(default=dict, blank=True)
    position = models.PositiveIntegerField(default=0)
    schema_problem = models.TextField(
        null=True, blank=True,
        help_text="Why its input schema is not valid JSON Schema, checked when listed: empty when it is; "
        "null when not checked (listed before the check was stored; checked when used).",
    )

    class Meta:
        verbose_name = "MCP tool"
        ordering = ["server", "position"]
        constraints = [models.UniqueConstraint(fields=["server", "name"], name="mcp_tool_server_name_uniq")]

    def __str__(self) -> str:
        return f"{self.server.name}::{self.name}"

    @property
    def is_idempotent(self) -> bool:
        """Only a tool that says ``idempotentHint: true`` is run again after an interruption."""
        return self.annotations.get("idempotentHint") is True

    @property
    def is_read_only(self) -> bool:
        """Only a tool that says ``readOnlyHint: true`` is taken not to run code: approving any other needs more."""
        return self.annotations.get("readOnlyHint") is True
