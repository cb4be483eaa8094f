from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from automation.services.prune import prune


class Command(BaseCommand):
    help = "Delete finished tasks, their events and old messages past the retention."

    def add_arguments(self, parser):
        parser.add_argument(
            "--older-than", type=int, metavar="DAYS", default=None,
            help="Age in days (default CONDUCTOR_RETENTION_DAYS).",
        )
        parser.add_argument("--dry-run", action="store_true", help="Count what would go; delete nothing.")

    def handle(self, *args, older_than, dry_run, **options):
        days = settings.CONDUCTOR_RETENTION_DAYS if older_than is None else older_than
        if days < 0:
            raise CommandError("--older-than must be 0 or more days")
        report = prune(older_than_days=days, dry_run=dry_run)
        prefix = "would delete" if dry_run else "deleted"
        self.stdout.write(f"{prefix} {report} (older than {days} days)")
