"""The executors of the task kinds (SPEC §3), attached to the kind registry on import."""

from automation.executors import delivery, instructions  # noqa: F401
