from django.core.management.base import BaseCommand

from pipelines.renewal import renewal_project


class Command(BaseCommand):
    help = "Run the renewal projector once: a renewal.deliver task for each idle conversation that is due."

    def add_arguments(self, parser):
        parser.add_argument(
            "--dry-run", action="store_true", help="Show what would be created; create nothing."
        )

    def handle(self, *args, dry_run, **options):
        report = renewal_project(dry_run=dry_run)
        for conversation_id, task_id in report.created:
            if dry_run:
                self.stdout.write(f"would create a renewal for conversation {conversation_id}")
            else:
                self.stdout.write(f"created renewal task {task_id} for conversation {conversation_id}")
        self.stdout.write(str(report))
