"""The tools of SPEC §5.1 (target ``conductor``): names, params, idempotency, policies.

Tools that read Conductor's own tasks (``tasks.status``) sit above the task
engine, so ``pipelines.tools`` registers them.
"""

from tools import basic, files, shell
from tools.registry import Policy, ToolSpec, tools

PATH = {"type": "string", "minLength": 1, "maxLength": 4096}


def object_schema(properties=None, required=(), extra=False):
    return {
        "type": "object",
        "properties": properties or {},
        "required": list(required),
        "additionalProperties": extra,
    }


tools.register(ToolSpec(
    name="echo",
    run=basic.echo,
    description="Returns its params unchanged.",
    params_schema={"type": "object"},
    example={"hello": "world"},
    is_idempotent=True,
    default_policy=Policy.ALLOW,
))
tools.register(ToolSpec(
    name="time.now",
    run=basic.time_now,
    description="The current time, ISO-8601 in UTC.",
    params_schema=object_schema(),
    example={},
    is_idempotent=True,
    default_policy=Policy.ALLOW,
))
tools.register(ToolSpec(
    name="files.list",
    run=files.files_list,
    description="Entries (name, type, size) of a workspace folder matching a glob.",
    params_schema=object_schema({
        "path": {**PATH, "default": "."},
        "glob": {"type": "string", "minLength": 1, "maxLength": 256, "default": "*"},
    }),
    example={"path": ".", "glob": "*"},
    is_idempotent=True,
    default_policy=Policy.ALLOW,
))
tools.register(ToolSpec(
    name="files.read",
    run=files.files_read,
    description=(
        "A workspace file as UTF-8 text, up to max_bytes; a binary file as its size, type and SHA-256 instead."
    ),
    params_schema=object_schema(
        {
            "path": PATH,
            "max_bytes": {
                "type": "integer", "minimum": 1, "maximum": files.MAX_READ_BYTES, "default": files.DEFAULT_MAX_BYTES,
            },
        },
        required=["path"],
    ),
    example={"path": "notes.md"},
    is_idempotent=True,
    default_policy=Policy.ALLOW,
))
tools.register(ToolSpec(
    name="files.write",
    run=files.files_write,
    plan=files.files_write_plan,
    description="Create, overwrite or append to a workspace file.",
    params_schema=object_schema(
        {
            "path": PATH,
            "content": {"type": "string"},
            "mode": {"enum": ["create", "overwrite", "append"], "default": "create"},
        },
        required=["path", "content"],
    ),
    example={"path": "notes.md", "content": "first line\n", "mode": "append"},
    # "append" twice is not "append" once.
    is_idempotent=False,
    default_policy=Policy.APPROVE,
))
tools.register(ToolSpec(
    name="shell.run",
    run=shell.shell_run,
    plan=shell.shell_plan,
    description="Run an argv list (no shell) in the workspace with a timeout.",
    params_schema=object_schema(
        {
            "argv": {
                "type": "array",
                "items": {"type": "string", "maxLength": 65536},
                "minItems": 1,
                "maxItems": 1024,
            },
            "cwd": {**PATH, "default": "."},
            "timeout_s": {"type": "number", "exclusiveMinimum": 0, "default": shell.DEFAULT_TIMEOUT_SECONDS},
        },
        required=["argv"],
    ),
    example={"argv": ["ls", "-la"]},
    is_idempotent=False,
    default_policy=Policy.APPROVE,
    runs_code=True,
    network_by_policy=True,
))
