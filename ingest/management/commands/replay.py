import contextlib
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError
from django.db import transaction
from tqdm import tqdm

from ingest.models import PluginClient
from ingest.services.replay import frames_replay


class Command(BaseCommand):
    help = (
        "Feed a JSON Lines file of plugin frames (as sent on the socket) through ingest. "
        "Idempotent: messages already stored are counted as duplicates."
    )

    def add_arguments(self, parser):
        parser.add_argument("path", type=Path)
        parser.add_argument("--dry-run", action="store_true", help="Report what would happen; store nothing.")
        parser.add_argument("--force", action="store_true", help="Store every message again, even if already stored.")
        parser.add_argument("--client", help="Client id the messages came through (default: the file's hello frames).")

    def handle(self, *args, path, dry_run, force, client, **options):
        if not path.is_file():
            raise CommandError(f"no such file: {path}")
        plugin_client = None
        if client:
            plugin_client = PluginClient.objects.filter(client_id=client).first()
            if plugin_client is None:
                raise CommandError(f"unknown plugin client {client!r}")

        progress = tqdm(
            total=path.stat().st_size, unit="B", unit_scale=True, desc=path.name,
            file=self.stderr._out, disable=options["verbosity"] == 0,
        )
        with path.open(encoding="utf-8", errors="replace") as lines, progress:
            def advance(line):
                progress.update(len(line.encode()))

            # A dry run goes through the real path inside one transaction that
            # is rolled back, so its counts are exact.
            with transaction.atomic() if dry_run else contextlib.nullcontext():
                summary = frames_replay(lines, client=plugin_client, force=force, on_line=advance)
                if dry_run:
                    transaction.set_rollback(True)

        for problem in summary.problems:
            self.stderr.write(problem)
        prefix = "dry run, nothing stored: " if dry_run else ""
        self.stdout.write(f"{prefix}{summary}")
