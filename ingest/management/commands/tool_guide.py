import json

from django.core.management.base import BaseCommand, CommandError

from conversations.selectors import ConversationNotFound, conversation_by_reference
from ingest.guide import LEFT_OUT_NO_HANDLES
from ingest.selectors.clients import plugin_client_owner, plugin_client_pk
from ingest.selectors.guides import conversation_guide_client_pk, tool_guide
from platforms import platforms


class Command(BaseCommand):
    help = (
        "Print the tool guide (SPEC 5.5) of a conversation, or of a new conversation on a platform: "
        "the text to give the chat's assistant."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--conversation", metavar="ID",
            help="Conductor's id of the conversation, or the platform's (with --platform or --client when ambiguous: "
            "two platforms, or two owners' chats with one id).",
        )
        parser.add_argument("--platform", choices=platforms.names(), help="The platform of a new conversation.")
        parser.add_argument(
            "--client", metavar="CLIENT_ID",
            help="Follow this plugin client's tool policies (default: the client the conversation was last seen through).",
        )
        parser.add_argument("--format", choices=["markdown", "json"], default="markdown")

    def handle(self, *args, conversation, platform, client, format, **options):
        client_pk = owner = None
        if client:
            client_pk = plugin_client_pk(client_id=client)
            if client_pk is None:
                raise CommandError(f"no plugin client {client!r}")
            owner = plugin_client_owner(client_pk=client_pk)
        found = None
        if conversation:
            try:
                # With --client, the platform's id names that client's owner's conversation.
                found = conversation_by_reference(reference=conversation, platform=platform, owner=owner)
            except ConversationNotFound as exc:
                raise CommandError(str(exc)) from exc
        if found is not None and client_pk is None:
            client_pk = conversation_guide_client_pk(conversation=found)
        guide = tool_guide(
            platform=found.platform if found else (platform or ""), conversation=found, client_pk=client_pk
        )
        if format == "json":
            self.stdout.write(json.dumps(guide.as_json(conversation_id=found.remote_id if found else None), indent=2))
        else:
            self.stdout.write(guide.text, ending="")
            # Only the text goes to stdout, to paste; what it leaves out is told beside it.
            for tool in guide.facts.tools_left_out:
                self.stderr.write(
                    f"note: {tool.header} is left out of this guide: {LEFT_OUT_NO_HANDLES} "
                    f"(owner {guide.facts.owner!r}): give another of the owner's conversations, seen through a plugin, "
                    "a handle on its admin page (Mail: Handle)"
                )
