from django.apps import AppConfig


class McpServersConfig(AppConfig):
    """MCP servers as targets (SPEC §5.4): their configuration, listed tools, and calls."""

    name = "mcp_servers"
    verbose_name = "MCP servers"

    def ready(self) -> None:
        from mcp_servers.selectors import mcp_tool_spec
        from tools.registry import tools

        tools.set_external(mcp_tool_spec)
