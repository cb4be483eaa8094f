"""The tool registry (STYLE rule 4).

Each tool is registered once, by target and name, with the JSON Schema its
params must match, whether running it twice is harmless (idempotent), and its
default permission policy (SPEC §5.2). Ingest validates blocks against it;
the dispatcher asks it whether an interrupted run may be retried.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError, best_match
from jsonschema.validators import validator_for

from core.registry import Registry

DEFAULT_TARGET = "conductor"


class Policy:
    """Permission of a tool (SPEC §5.2). The values are stored in ``ToolPolicy``."""

    ALLOW = "allow"
    APPROVE = "approve"  # the task is created blocked until an operator approves it
    DENY = "deny"  # rejected at ingest

    CHOICES = [(ALLOW, "Allow"), (APPROVE, "Needs approval"), (DENY, "Deny")]


class UnknownTool(LookupError):
    pass


class ToolError(Exception):
    """The tool ran and failed in a way that will not change on a retry (a terminal failure).

    ``result`` carries what the tool did produce (a command's output, say),
    so the chat sees it next to the error.
    """

    def __init__(self, message: str, *, result: Any = None) -> None:
        super().__init__(message)
        self.result = result


class ToolRetryableError(ToolError):
    """The tool failed for a passing reason (a timeout of an idempotent tool): worth another attempt."""


@dataclass(frozen=True)
class ToolCall:
    """What a tool's implementation gets: its validated params and its surroundings.

    Long-running tools watch ``cancelled`` (set when the task is cancelled or
    its lease is lost) and stop.
    """

    params: dict[str, Any]
    workspace: Path
    shell_max_timeout_seconds: float
    cancelled: threading.Event = field(default_factory=threading.Event)
    # Files a command the tool starts must not be able to read: the server's
    # secret key file and its .env (CONDUCTOR_SECRET_FILES). shell.run hides them.
    secret_files: tuple[Path, ...] = ()
    # Folders of the server's own state that no command may see, whatever lies beside them in the
    # system's folders (the data folder around the workspace: settings.DATA_DIR).
    private_folders: tuple[Path, ...] = ()
    # shell.run: a tool policy allowed this command the network (ToolPolicy.allow_network).
    allow_network: bool = False
    # shell.run: run even where the kernel refuses a part of the sandbox (CONDUCTOR_SHELL_UNCONFINED).
    unconfined: bool = False
    # The instruction the tool runs for: tools that act on Conductor itself
    # (mail.send) say where it came from. None outside an instruction.
    origin: ToolOrigin | None = None


@dataclass(frozen=True)
class ToolOrigin:
    """Where a tool call came from: its instruction, the message that held it, that message's conversation."""

    instruction_id: int
    message_id: int
    conversation_id: int


ToolFunction = Callable[[ToolCall], Any]


@dataclass(frozen=True)
class ExampleFacts:
    """What a tool's worked example may depend on: the mail handles the conversation can write to."""

    mail_handles: tuple[str, ...] = ()


# A tool's worked example for the tool guide (SPEC §5.5): params that pass its
# schema and its check, or a function of the conversation's facts giving them
# (None: no example fits this conversation).
Example = dict[str, Any] | Callable[[ExampleFacts], dict[str, Any] | None]


class DuplicateTool(ValueError):
    pass


def _schema_validator(schema: dict[str, Any]) -> type[Draft202012Validator]:
    # The schema's own "$schema" picks the draft (MCP servers often write
    # draft-07); without one, 2020-12.
    return validator_for(schema, default=Draft202012Validator)


def schema_problem(schema: dict[str, Any]) -> str:
    """Why ``schema`` is not a valid JSON Schema of its draft, in one line; "" when it is."""
    try:
        _schema_validator(schema).check_schema(schema)
    except SchemaError as exc:
        return exc.message
    return ""


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    params_schema: dict[str, Any]
    is_idempotent: bool
    default_policy: str
    run: ToolFunction | None = field(default=None, compare=False)
    target: str = DEFAULT_TARGET
    # A check of valid params against the server's state (a mail's recipient
    # exists, and is not the calling conversation), at ingest and again before
    # running, called as ``check(params, conversation_id=...)`` with the
    # calling conversation's id (None when there is none): the reason they do
    # not fit, in one line, or None. It must not reveal what the sender may not know.
    check: Callable[..., str | None] | None = field(default=None, compare=False)
    # What a call would do, resolved exactly as running it resolves it (a
    # command's folder, a file's real path), for an operator deciding whether
    # to approve it: labelled values, in order. It runs nothing; it raises
    # ``ToolError`` when the run would refuse the call. None: the params say it all.
    plan: Callable[[ToolCall], dict[str, Any]] | None = field(default=None, compare=False)
    example: Example | None = field(default=None, compare=False)
    # Whether running the tool runs code of the caller's choosing, with the
    # server user's rights (``shell.run``; an MCP tool not marked read-only,
    # since what it does is its server's to say): approving such a call needs
    # a permission of its own (``automation.approve_code``).
    runs_code: bool = False
    # Whether the tool's sandbox has no network unless a tool policy allows it (``shell.run``,
    # ``ToolPolicy.allow_network``): the call then gets ``ToolCall.allow_network``.
    network_by_policy: bool = False
    # The schema was already checked against its draft's meta-schema (an MCP
    # tool's, when its server was listed: ``schema_problem``), which costs
    # jsonschema milliseconds per tool; False: it is checked here.
    schema_checked: bool = field(default=False, repr=False, compare=False)
    _validator: Draft202012Validator = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        validator = _schema_validator(self.params_schema)
        if not self.schema_checked:
            validator.check_schema(self.params_schema)
        object.__setattr__(self, "_validator", validator(self.params_schema))

    @property
    def family(self) -> str:
        """What the tool guide shows one example for: a target's own tools by their first name part, others by target."""
        return self.name.split(".", 1)[0] if self.target == DEFAULT_TARGET else self.target

    def example_params(self, facts: ExampleFacts) -> dict[str, Any] | None:
        """The tool's worked example for a conversation with these facts, or None."""
        if self.example is None or isinstance(self.example, dict):
            return self.example
        return self.example(facts)

    @property
    def full_name(self) -> str:
        return f"{self.target}::{self.name}"

    def params_error(self, params: dict[str, Any]) -> str | None:
        """Why ``params`` do not fit this tool, in one line, or None when they do."""
        error = best_match(self._validator.iter_errors(params))
        if error is None:
            return None
        where = "params" + "".join(
            f"[{part}]" if isinstance(part, int) else f".{part}" for part in error.absolute_path
        )
        return f"{where}: {error.message}"

    def call_error(self, params: dict[str, Any], *, conversation_id: int | None = None) -> str | None:
        """Why ``params`` cannot be run for ``conversation_id``: their schema first, then the tool's own check."""
        if error := self.params_error(params):
            return error
        return self.check(params, conversation_id=conversation_id) if self.check is not None else None


# The tools of targets other than ``conductor`` (MCP servers, SPEC §5.4): a
# function of ``(target, name)`` giving the spec, or raising ``UnknownTool``
# with the reason (unknown or disabled server, unknown tool).
ExternalTools = Callable[[str, str], ToolSpec]


class ToolRegistry(Registry[ToolSpec]):
    """Tools by ``(target, name)``.

    Its own entries are Conductor's tools; another target's tools come from
    the ``external`` source a higher layer installs (``mcp_servers``), looked
    up when asked for, since an operator adds and changes servers at run time.
    Iterating gives only the registered tools.
    """

    what = "tool"
    external: ExternalTools | None = None
    duplicate_error = DuplicateTool
    unknown_error = UnknownTool

    def key_of(self, spec: ToolSpec) -> tuple[str, str]:
        return (spec.target, spec.name)

    def describe(self, key: tuple[str, str]) -> str:
        return f"tool {key[0]}::{key[1]}"

    def unknown_message(self, key: tuple[str, str]) -> str:
        target, name = key
        if not any(t == target for t, _ in self._entries):
            return f"unknown target {target!r}"
        known = ", ".join(sorted(n for t, n in self._entries if t == target))
        return f"unknown tool {name!r} for target {target!r}; known: {known}"

    def get(self, name: str, *, target: str = DEFAULT_TARGET) -> ToolSpec:
        if target != DEFAULT_TARGET and self.external is not None:
            return self.external(target, name)
        return super().get((target, name))

    def set_external(self, source: ExternalTools | None) -> None:
        """Install the source of other targets' tools (one; None removes it)."""
        self.external = source

    def __contains__(self, name: object) -> bool:
        return (DEFAULT_TARGET, name) in self._entries


tools = ToolRegistry()
