"""``DeliveryRequest`` and ``ToolPolicy`` move to ``ingest``, where their services are.

State only: their tables keep their names and rows (``ingest`` 0006 takes
them over with ``db_table`` set to these names), so nothing is done to the
database here.
"""

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ("automation", "0008_task_outcome_series_kind_pause"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.DeleteModel(name="DeliveryRequest"),
                migrations.DeleteModel(name="ToolPolicy"),
            ],
            database_operations=[],
        ),
    ]
