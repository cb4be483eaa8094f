"""The demo command's first impression: a refused connection says how to point it elsewhere."""

import pytest
from django.conf import settings as django_settings
from django.core.management import CommandError, call_command

from automation.models import DispatcherWorker
from automation.services.dispatcher_state import dispatcher_pause_set, dispatcher_worker_heartbeat, kind_pause_set
from conductor_site.management.commands.demo import held_because
from core.clock import now_ms
from ingest.kinds import INSTRUCTION_DELIVER
from tests.factories import ConversationFactory, make_task

pytestmark = pytest.mark.django_db


def test_a_refused_connection_suggests_the_url_option(tmp_path, settings):
    settings.CONDUCTOR_WORKSPACE = str(tmp_path)
    with pytest.raises(CommandError, match=r"--url ws://HOST:PORT/ws/plugin/"):
        call_command("demo", url="ws://127.0.0.1:9/ws/plugin/", timeout=1)


def test_the_fixtures_first_block_lists_the_folder_the_demo_seeds():
    first = (django_settings.BASE_DIR / "fixtures" / "claude.jsonl").read_text().splitlines()[1]
    assert r'files.list\n{\"path\": \"notes\"' in first


def test_a_demo_that_gets_no_delivery_says_what_holds_its_tasks(settings):
    conversation = ConversationFactory(remote_id="demo-1")
    make_task(kind=INSTRUCTION_DELIVER, conversation_id=conversation.pk)
    kind_pause_set(kind=INSTRUCTION_DELIVER, is_paused=True, actor="ops")
    dispatcher_worker_heartbeat(owner="loop", server="server-a", now=now_ms())
    reason = held_because({"demo-1"})
    assert "(instruction.deliver) are paused" in reason and "cluster" not in reason

    DispatcherWorker.objects.filter(owner="loop").update(heartbeat_at=now_ms() - 60_000)
    kind_pause_set(kind=INSTRUCTION_DELIVER, is_paused=False, actor="ops")
    dispatcher_pause_set(is_paused=True, actor="ops")
    reason = held_because({"demo-1"})
    assert "the dispatcher is paused for every conversation" in reason
    assert "last beat 60 s ago: is the django-q2 cluster running" in reason
