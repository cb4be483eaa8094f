import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from ingest.models import ToolPolicy
from ingest.selectors.policies import tool_policy_for
from tests.factories import ConversationFactory, PluginClientFactory
from tools.registry import Policy


@pytest.mark.django_db
@pytest.mark.parametrize("tool,policy", [("echo", "allow"), ("files.read", "allow"), ("shell.run", "approve"), ("files.write", "approve")])
def test_defaults_apply_without_rows(tool, policy):
    assert tool_policy_for(tool=tool, client_pk=None, conversation_pk=None) == policy


@pytest.mark.django_db
def test_the_most_specific_row_wins():
    client, other_client = PluginClientFactory(), PluginClientFactory()
    conversation, other_conversation = ConversationFactory(), ConversationFactory()
    ToolPolicy.objects.create(tool="shell.run", policy=Policy.DENY)
    ToolPolicy.objects.create(tool="shell.run", client=client, policy=Policy.APPROVE)
    ToolPolicy.objects.create(tool="shell.run", conversation=conversation, policy=Policy.ALLOW)
    ToolPolicy.objects.create(
        tool="shell.run", client=client, conversation=other_conversation, policy=Policy.DENY
    )

    def policy(c, conv):
        return tool_policy_for(tool="shell.run", client_pk=c and c.pk, conversation_pk=conv and conv.pk)

    assert policy(None, None) == "deny"  # global row
    assert policy(client, None) == "approve"  # client row beats global
    assert policy(other_client, conversation) == "allow"  # conversation row
    assert policy(client, conversation) == "allow"  # conversation beats client
    assert policy(client, other_conversation) == "deny"  # client + conversation beats both


@pytest.mark.django_db
def test_one_row_per_scope():
    client = PluginClientFactory()
    ToolPolicy.objects.create(tool="echo", policy=Policy.DENY)
    ToolPolicy.objects.create(tool="echo", client=client, policy=Policy.DENY)
    with pytest.raises(IntegrityError), transaction.atomic():
        ToolPolicy.objects.create(tool="echo", policy=Policy.ALLOW)
    with pytest.raises(IntegrityError), transaction.atomic():
        ToolPolicy.objects.create(tool="echo", client=client, policy=Policy.ALLOW)


def test_a_policy_for_an_unknown_tool_does_not_validate():
    with pytest.raises(ValidationError, match="unknown tool"):
        ToolPolicy(tool="rm.rf", policy=Policy.ALLOW).clean()
