import os

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from conversations.models import DEFAULT_OWNER
from ingest.pairing import pairing_code_encode
from ingest.services.clients import plugin_client_create
from ingest.tokens import WeakTokenError


def default_server_url() -> str:
    """Where `make run` listens: HOST and PORT from the environment, as `serve` reads them."""
    return f"http://{os.environ.get('HOST', '127.0.0.1')}:{os.environ.get('PORT', '8000')}"


class Command(BaseCommand):
    help = (
        "Register a browser plugin and print its client id, token and pairing code "
        "(shown only once)."
    )

    def add_arguments(self, parser):
        parser.add_argument("name", help="A name for the plugin, e.g. 'laptop chrome'.")
        parser.add_argument(
            "--token",
            help="Use this token instead of a generated one (at least 32 characters).",
        )
        parser.add_argument(
            "--owner",
            default=DEFAULT_OWNER,
            help="Whose browser this is (default %(default)r): a conversation moves only between "
            "clients of the same owner, and its results go only to them.",
        )
        parser.add_argument(
            "--server-url",
            default=None,
            help="The server's URL as the browser reaches it, for the pairing code "
            "(default http://HOST:PORT, as make run).",
        )

    def handle(self, *args, name, token, owner, server_url, **options):
        try:
            client, token = plugin_client_create(name=name, token=token, owner=owner)
        except (ValidationError, WeakTokenError) as exc:
            messages = exc.messages if isinstance(exc, ValidationError) else [str(exc)]
            raise CommandError("; ".join(messages)) from exc
        code = pairing_code_encode(
            server_url=server_url or default_server_url(), client_id=client.client_id, token=token
        )
        self.stdout.write(f"client_id: {client.client_id}")
        self.stdout.write(f"owner: {client.owner}")
        self.stdout.write(f"token: {token}")
        self.stdout.write(f"pairing code: {code}")
        self.stdout.write(
            self.style.WARNING(
                "Paste the pairing code into the plugin's options now: it is not shown again."
            )
        )
