from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("ingest", "0013_instruction_reopened_since_delivery"),
    ]

    operations = [
        migrations.AddField(
            model_name="pluginclient",
            name="viewing_conversation_id",
            field=models.CharField(blank=True, max_length=255),
        ),
        migrations.AddField(
            model_name="pluginclient",
            name="viewing_platform",
            field=models.CharField(blank=True, max_length=16),
        ),
    ]
