"""Ingest keeps the tool policies in memory and reads them again only when their version token
changed: a policy changed anywhere (the admin, another process) applies to the next message."""

import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from ingest.frames import parse_final_message
from ingest.models import Instruction, ToolPolicy, ToolPolicyVersion
from ingest.services.messages import message_ingest
from tests.factories import PluginClientFactory
from tests.procs import run_in_processes
from tools.registry import Policy

POLICY_TABLE = f'FROM "{ToolPolicy._meta.db_table}"'


def ingest(client, n: int):
    """A message with one ``echo`` block; returns its instruction."""
    text = f"```baa\necho\n{json.dumps({'n': n})}\n```"
    result = message_ingest(message=parse_final_message({
        "type": "browser.final_message", "id": f"f-{n}", "platform": "claude", "conversation_id": "conv-1",
        "message_id": f"msg-{n}", "text": text,
    }), client=client)
    return Instruction.objects.get(message_id=result.message_id)


@pytest.mark.django_db
def test_a_lone_frame_reads_the_policies_only_when_their_version_changed():
    client = PluginClientFactory()
    ingest(client, 0)

    with CaptureQueriesContext(connection) as unchanged:
        ingest(client, 1)
    ToolPolicy.objects.create(tool="shell.run", policy=Policy.DENY)
    with CaptureQueriesContext(connection) as changed:
        ingest(client, 2)
    ToolPolicy.objects.create(tool="echo", policy=Policy.DENY)

    assert not [query for query in unchanged.captured_queries if POLICY_TABLE in query["sql"]]
    assert len([query for query in changed.captured_queries if POLICY_TABLE in query["sql"]]) == 1
    assert len(changed.captured_queries) == len(unchanged.captured_queries) + 1
    assert ingest(client, 3).status == Instruction.Status.REJECTED


@pytest.mark.django_db
def test_saving_and_deleting_a_policy_each_give_a_new_version():
    tokens = [ToolPolicyVersion.objects.get().token]
    policy = ToolPolicy.objects.create(tool="echo", policy=Policy.DENY)
    tokens.append(ToolPolicyVersion.objects.get().token)
    policy.policy = Policy.APPROVE
    policy.save()
    tokens.append(ToolPolicyVersion.objects.get().token)
    policy.delete()
    tokens.append(ToolPolicyVersion.objects.get().token)

    assert len(set(tokens)) == 4


@pytest.mark.django_db
def test_without_its_version_row_ingest_reads_the_policies_each_time():
    client = PluginClientFactory()
    ToolPolicyVersion.objects.all().delete()
    ingest(client, 0)
    ToolPolicy.objects.bulk_create([ToolPolicy(tool="echo", policy=Policy.DENY)])  # no signal, no token
    ToolPolicyVersion.objects.all().delete()

    assert ingest(client, 1).status == Instruction.Status.REJECTED


@pytest.mark.django_db(transaction=True)
def test_a_policy_changed_in_another_process_applies_to_the_next_message_here():
    client = PluginClientFactory()
    assert ingest(client, 0).status != Instruction.Status.REJECTED  # this process now holds the policies

    run_in_processes("tests.ingest.workers:tool_policy_set", [("echo", Policy.DENY)])
    assert ingest(client, 1).status == Instruction.Status.REJECTED

    run_in_processes("tests.ingest.workers:tool_policy_set", [("echo", None)])
    assert ingest(client, 2).status != Instruction.Status.REJECTED
