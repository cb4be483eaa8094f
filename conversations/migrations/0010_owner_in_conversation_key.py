"""A conversation is its owner's: its key becomes (owner, platform, remote id).

First every conversation takes the owner of the plugin client that first sent into it, as that
client's owner is now: the client of its first link (a link is recorded by the first message a
client of the conversation's owner sends into it, and a message through another owner's client
recorded none). A conversation with no link keeps its owner, except an unclaimed one (owner
empty) that a client sent into all the same: it takes the owner of the client of its earliest
message. Conversations made before owners existed, and given `default` by 0008, so go to the
owner their clients were given since. Messages stay where they are.

Then the unique key (platform, remote_id) becomes (owner, platform, remote_id); the first holds
every row already, so the second does. Going back fails once two owners share a conversation id.
"""

import django.core.validators
from django.db import migrations, models
from django.db.models import Exists, OuterRef, Subquery


def owners_from_first_clients(apps, schema_editor):
    Conversation = apps.get_model("conversations", "Conversation")
    ConversationLink = apps.get_model("conversations", "ConversationLink")
    Message = apps.get_model("conversations", "Message")
    links = ConversationLink.objects.filter(conversation=OuterRef("pk"))
    Conversation.objects.filter(Exists(links)).update(
        owner=Subquery(links.order_by("pk").values("client__owner")[:1])
    )
    # Texts Conductor delivered went through the route's client: none of them sent into the conversation.
    sent = Message.objects.filter(conversation=OuterRef("pk"), client__isnull=False).exclude(source="conductor")
    Conversation.objects.filter(Exists(sent), owner="").update(
        owner=Subquery(sent.order_by("received_at", "pk").values("client__owner")[:1])
    )


class Migration(migrations.Migration):

    dependencies = [
        ("conversations", "0009_delivered_dedupe_key"),
        ("ingest", "0007_pluginclient_owner"),
    ]

    operations = [
        migrations.RunPython(owners_from_first_clients, migrations.RunPython.noop),
        migrations.RemoveConstraint(
            model_name="conversation",
            name="conversation_platform_remote_id_uniq",
        ),
        migrations.AddConstraint(
            model_name="conversation",
            constraint=models.UniqueConstraint(
                fields=("owner", "platform", "remote_id"), name="conversation_owner_platform_remote_id_uniq"
            ),
        ),
        migrations.AlterField(
            model_name="conversation",
            name="owner",
            field=models.CharField(
                blank=True, default="default",
                help_text="The owner of the plugin clients that send into it; only that owner's clients route it. "
                "Empty: not yet seen through a client.",
                max_length=64,
                validators=[django.core.validators.RegexValidator(
                    "\\A[a-z0-9][a-z0-9_.-]*\\Z",
                    "An owner starts with a lowercase letter or digit and holds only lowercase letters, digits, "
                    "'_', '.' and '-'.",
                )],
            ),
        ),
    ]
