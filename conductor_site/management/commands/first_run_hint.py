"""Print how to create the first admin user, when there is none yet (`make run` calls this)."""

import os

from django.core.management.base import BaseCommand

from console.first_run import first_run_hint


class Command(BaseCommand):
    help = "Say how to create the first admin user when no staff user exists; print nothing otherwise."

    def add_arguments(self, parser):
        parser.add_argument("--host", default=os.environ.get("HOST", "127.0.0.1"))
        parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))

    def handle(self, *args, host, port, **options):
        hint = first_run_hint(admin_url=f"http://{host}:{port}/admin/")
        if hint:
            self.stdout.write(self.style.WARNING(hint))
