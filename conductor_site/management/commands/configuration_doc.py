"""Write docs/configuration.md from the settings table (`make docs` checks it first)."""

from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from conductor_site.settings_reference import configuration_markdown


class Command(BaseCommand):
    help = (
        "Write docs/configuration.md from conductor_site/settings_reference.py; "
        "with --check, write nothing and fail when the page is not what the table gives."
    )

    def add_arguments(self, parser):
        parser.add_argument("--path", type=Path, default=settings.BASE_DIR / "docs" / "configuration.md")
        parser.add_argument("--check", action="store_true", help="fail when the page is stale; write nothing")

    def handle(self, *args, path: Path, check: bool, **options):
        page = configuration_markdown()
        current = path.read_text() if path.exists() else None
        if check:
            if current != page:
                raise CommandError(
                    f"{path} is stale: run `.venv/bin/python manage.py configuration_doc` and commit it"
                )
            self.stdout.write(f"{path}: up to date")
            return
        if current == page:
            self.stdout.write(f"{path}: up to date")
            return
        path.write_text(page)
        self.stdout.write(f"{path}: written")
