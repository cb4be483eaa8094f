import pytest
from django.contrib import admin

from automation.models import AutomationTask, TaskStatus
from console.lists import count_of
from conversations.models import Message
from ingest.models import Instruction
from tests.factories import InstructionFactory, MessageFactory, make_task


@pytest.mark.parametrize("model", [Message, Instruction, AutomationTask])
def test_the_default_order_of_a_large_list_is_an_index(model):
    ordering = admin.site.get_model_admin(model).ordering
    columns = [model._meta.pk.name if name.lstrip("-") == "pk" else name.lstrip("-") for name in ordering]
    assert columns in [index.fields for index in model._meta.indexes]


@pytest.mark.django_db
def test_count_of_counts_related_rows_and_gives_zero_for_none():
    busy, idle = MessageFactory(), MessageFactory()
    InstructionFactory.create_batch(3, message=busy)
    counted = dict(Message.objects.annotate(n=count_of(Instruction.objects.all(), to="message")).values_list("pk", "n"))
    assert counted == {busy.pk: 3, idle.pk: 0}


@pytest.mark.django_db
def test_count_of_counts_only_the_rows_of_the_given_queryset():
    message = MessageFactory()
    make_task(TaskStatus.PENDING, message_id=message.pk)
    make_task(TaskStatus.SUCCEEDED, message_id=message.pk)
    pending = AutomationTask.objects.filter(status=TaskStatus.PENDING)
    assert Message.objects.annotate(n=count_of(pending, to="message")).get().n == 1
