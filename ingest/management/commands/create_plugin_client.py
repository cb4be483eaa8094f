from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from ingest.services.clients import plugin_client_create
from ingest.tokens import WeakTokenError


class Command(BaseCommand):
    help = "Register a browser plugin and print its client id and token (shown only once)."

    def add_arguments(self, parser):
        parser.add_argument("name", help="A name for the plugin, e.g. 'laptop chrome'.")
        parser.add_argument(
            "--token",
            help="Use this token instead of a generated one (at least 32 characters).",
        )

    def handle(self, *args, name, token, **options):
        try:
            client, token = plugin_client_create(name=name, token=token)
        except (ValidationError, WeakTokenError) as exc:
            messages = exc.messages if isinstance(exc, ValidationError) else [str(exc)]
            raise CommandError("; ".join(messages)) from exc
        self.stdout.write(f"client_id: {client.client_id}")
        self.stdout.write(f"token: {token}")
        self.stdout.write(
            self.style.WARNING("Store the token in the plugin now: it is not shown again.")
        )
