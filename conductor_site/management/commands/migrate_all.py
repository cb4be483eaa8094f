from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand

from conductor_site.migration_lock import migrations_locked


class Command(BaseCommand):
    help = (
        "Apply migrations to every configured database (the app's and the channel layer's), "
        "one migrate_all at a time: a second one waits for the first, then finds nothing to do."
    )

    def handle(self, *args, **options):
        with migrations_locked(note=self.stdout.write):
            for alias in settings.DATABASES:
                self.stdout.write(f"Migrating database '{alias}'")
                call_command("migrate", database=alias, interactive=False, verbosity=options["verbosity"])
            if settings.CONDUCTOR_MCP_SERVERS:
                # make run: the servers of the file are there, their tools listed, before serving.
                call_command("mcp_servers", stdout=self.stdout)
