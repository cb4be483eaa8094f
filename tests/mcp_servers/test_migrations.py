"""The MCP servers app's data migrations: the schemas of tools listed before are checked once, at migrate."""

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("mcp_servers", "0002_mcpserver_writable")]
AFTER = [("mcp_servers", "0003_mcptool_schema_problem")]


def test_tools_listed_before_get_their_schemas_verdict():
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    apps = executor.loader.project_state(BEFORE).apps
    server = apps.get_model("mcp_servers", "McpServer").objects.create(name="old", command="/bin/false")
    Tool = apps.get_model("mcp_servers", "McpTool")
    Tool.objects.create(server=server, name="good", input_schema={"type": "object"}, position=0)
    Tool.objects.create(server=server, name="empty", input_schema={}, position=1)
    Tool.objects.create(server=server, name="broken", input_schema={"type": 5}, position=2)
    try:
        executor = MigrationExecutor(connection)
        executor.migrate(AFTER)
        apps = executor.loader.project_state(AFTER).apps
        problems = dict(apps.get_model("mcp_servers", "McpTool").objects.values_list("name", "schema_problem"))
        assert problems["good"] == problems["empty"] == ""
        assert "5 is not valid" in problems["broken"]
    finally:
        MigrationExecutor(connection).migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())
