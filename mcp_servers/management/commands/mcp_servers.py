from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from mcp_servers.models import McpServer
from mcp_servers.services import ServersFileError, mcp_server_refresh, mcp_servers_file_sync


class Command(BaseCommand):
    help = (
        "Load the MCP servers of CONDUCTOR_MCP_SERVERS (or --file) and list their tools; "
        "with --refresh NAME..., list those servers' tools again."
    )

    def add_arguments(self, parser):
        parser.add_argument("--file", help="A JSON file in the mcpServers shape (default: CONDUCTOR_MCP_SERVERS).")
        parser.add_argument("--refresh", nargs="+", metavar="NAME", help="Only list these servers' tools again.")

    def handle(self, *args, **options):
        if options["refresh"]:
            for server in McpServer.objects.filter(name__in=options["refresh"]):
                ok = mcp_server_refresh(server=server)
                self.stdout.write(f"{server.name}: {'listed' if ok else 'failed: ' + server.last_error}")
            return
        path = options["file"] or settings.CONDUCTOR_MCP_SERVERS
        if not path:
            self.stdout.write("No servers file: CONDUCTOR_MCP_SERVERS is not set.")
            return
        try:
            names = mcp_servers_file_sync(path=path)
        except ServersFileError as exc:
            raise CommandError(str(exc)) from None
        for server in McpServer.objects.filter(name__in=names):
            state = "disabled" if not server.enabled else (f"failed: {server.last_error}" if server.last_error
                                                            else f"{server.tools.count()} tools")
            self.stdout.write(f"{server.name}: {state}")
