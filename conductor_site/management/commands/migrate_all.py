from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Apply migrations to every configured database (the app's and the channel layer's)."

    def handle(self, *args, **options):
        for alias in settings.DATABASES:
            self.stdout.write(f"Migrating database '{alias}'")
            call_command("migrate", database=alias, interactive=False, verbosity=options["verbosity"])
        if settings.CONDUCTOR_MCP_SERVERS:
            # make run: the servers of the file are there, their tools listed, before serving.
            call_command("mcp_servers", stdout=self.stdout)
