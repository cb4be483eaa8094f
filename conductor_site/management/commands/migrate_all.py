from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Apply migrations to every configured database (the app's and the channel layer's)."

    def handle(self, *args, **options):
        for alias in settings.DATABASES:
            self.stdout.write(f"Migrating database '{alias}'")
            call_command("migrate", database=alias, interactive=False, verbosity=options["verbosity"])
