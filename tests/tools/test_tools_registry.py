import pytest

from tools.registry import (
    DuplicateTool,
    Policy,
    ToolRegistry,
    ToolSpec,
    UnknownTool,
    tools,
)

SPEC_TOOLS = {
    # name: (idempotent, default policy)
    "echo": (True, Policy.ALLOW),
    "time.now": (True, Policy.ALLOW),
    "tasks.status": (True, Policy.ALLOW),
    "files.list": (True, Policy.ALLOW),
    "files.read": (True, Policy.ALLOW),
    "files.write": (False, Policy.APPROVE),
    "shell.run": (False, Policy.APPROVE),
    # Its dedupe key makes a second run return the first run's mail.
    "mail.send": (True, Policy.ALLOW),
}


def test_every_tool_of_the_spec_is_registered_with_its_default_policy():
    registered = {spec.name: (spec.is_idempotent, spec.default_policy) for spec in tools}
    assert registered == SPEC_TOOLS
    assert {spec.target for spec in tools} == {"conductor"}


def test_only_shell_run_of_conductors_own_tools_runs_code():
    # Approving a tool that runs code needs automation.approve_code (docs/security.md).
    assert {spec.name for spec in tools if spec.runs_code} == {"shell.run"}


@pytest.mark.parametrize(
    "tool,params,error",
    [
        ("echo", {"anything": [1, {"x": None}]}, None),
        ("time.now", {}, None),
        ("time.now", {"tz": "UTC"}, "params: Additional properties are not allowed ('tz' was unexpected)"),
        ("files.list", {}, None),
        ("files.list", {"path": ".", "glob": "*.md"}, None),
        ("files.read", {"path": "notes/todo.md", "max_bytes": 100}, None),
        ("files.read", {}, "params: 'path' is a required property"),
        ("files.read", {"path": "a", "max_bytes": 0}, "params.max_bytes: 0 is less than the minimum of 1"),
        ("files.read", {"path": 7}, "params.path: 7 is not of type 'string'"),
        ("files.write", {"path": "a", "content": "x", "mode": "append"}, None),
        ("files.write", {"path": "a", "content": "x", "mode": "truncate"}, "params.mode: 'truncate' is not one of"),
        ("shell.run", {"argv": ["ls", "-l"], "cwd": ".", "timeout_s": 5}, None),
        ("shell.run", {"argv": "ls -l"}, "params.argv: 'ls -l' is not of type 'array'"),
        ("shell.run", {"argv": []}, "params.argv: [] should be non-empty"),
        ("shell.run", {"argv": ["ls", 3]}, "params.argv[1]: 3 is not of type 'string'"),
        ("shell.run", {"argv": ["ls"], "timeout_s": 0}, "params.timeout_s: 0 is less than or equal to the minimum of 0"),
    ],
)
def test_params_are_checked_against_each_tools_schema(tool, params, error):
    found = tools.get(tool).params_error(params)
    if error is None:
        assert found is None
    else:
        assert found is not None and found.startswith(error), found


@pytest.mark.django_db  # other targets are MCP servers, read from the database
def test_unknown_tool_and_target_raise_clear_errors():
    with pytest.raises(UnknownTool, match="unknown tool 'files.delete' for target 'conductor'; known: echo"):
        tools.get("files.delete")
    with pytest.raises(UnknownTool, match="unknown target 'laptop'"):
        tools.get("echo", target="laptop")


def test_a_duplicate_registration_raises():
    registry = ToolRegistry()
    spec = ToolSpec(name="x", description="", params_schema={}, is_idempotent=True, default_policy=Policy.ALLOW)
    registry.register(spec)
    with pytest.raises(DuplicateTool):
        registry.register(spec)


def test_a_broken_schema_fails_at_registration():
    with pytest.raises(Exception, match="is not valid under any of the given schemas|is not of type"):
        ToolSpec(name="x", description="", params_schema={"type": 5}, is_idempotent=True, default_policy=Policy.ALLOW)
