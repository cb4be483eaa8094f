from django.db import migrations, models

FINISHED = ("succeeded", "failed", "rejected", "cancelled")


def reopened_so_far(apps, schema_editor):
    """The open blocks of a message that has a delivery were retried after it: a follow-up carries them."""
    alias = schema_editor.connection.alias
    Task, Instruction = apps.get_model("automation", "AutomationTask"), apps.get_model("ingest", "Instruction")
    delivered = Task.objects.using(alias).filter(kind="instruction.deliver", message_id__isnull=False)
    Instruction.objects.using(alias).filter(message_id__in=delivered.values("message_id")).exclude(
        status__in=FINISHED,
    ).update(reopened_since_delivery=True)


class Migration(migrations.Migration):

    dependencies = [
        ('ingest', '0012_tool_policy_allow_network'),
        ('automation', '0014_dispatcherworker_key_fingerprint'),
    ]

    operations = [
        migrations.AddField(
            model_name='instruction',
            name='reopened_since_delivery',
            field=models.BooleanField(default=False, help_text='Retried after it finished: the message\'s next follow-up delivery carries its new result.'),
        ),
        migrations.RunPython(reopened_so_far, migrations.RunPython.noop),
    ]
