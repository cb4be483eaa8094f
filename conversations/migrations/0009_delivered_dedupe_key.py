"""The messages Conductor delivered take their task's dedupe key (``delivered_dedupe_key``), which makes a
second store for the same task find the first through the unique index rather than a scan of the frames."""

from django.db import migrations


def keys_from_frames(apps, schema_editor):
    Message = apps.get_model("conversations", "Message")
    seen = set()
    delivered = (
        Message.objects.filter(source="conductor", dedupe_key__isnull=True)
        .order_by("pk").values_list("pk", "conversation_id", "raw_frame")
    )
    for pk, conversation_id, frame in delivered.iterator(chunk_size=2000):
        task_id = (frame or {}).get("delivery_key") if isinstance(frame, dict) else None
        if not task_id or (conversation_id, task_id) in seen:
            continue
        seen.add((conversation_id, task_id))
        Message.objects.filter(pk=pk).update(dedupe_key=f"delivery:{task_id}")


class Migration(migrations.Migration):
    dependencies = [("conversations", "0008_owner_and_moves")]
    operations = [migrations.RunPython(keys_from_frames, migrations.RunPython.noop, elidable=True)]
