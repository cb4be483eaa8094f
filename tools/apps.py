from django.apps import AppConfig


class ToolsConfig(AppConfig):
    """The tools an instruction can name (SPEC §5.1) and their policies."""

    name = "tools"

    def ready(self) -> None:
        from tools import catalog, checks  # noqa: F401  (fills the tool registry, registers the system checks)
