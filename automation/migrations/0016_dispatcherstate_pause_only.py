# The last tick left DispatcherState: liveness is each loop's DispatcherWorker row.
#
# Safe while old code runs (docs/operations.md, "Upgrading while plugins stay
# connected"): the two columns leave the migration state only and stay in the
# table, so an old loop that still writes its last tick there goes on until it
# restarts. last_tick_owner gets a database default first, so that this code,
# which no longer names it, can insert the row (the global pause's). A later
# release drops both columns.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('automation', '0015_task_part_away_since'),
    ]

    operations = [
        migrations.AlterField(
            model_name='dispatcherstate',
            name='last_tick_owner',
            field=models.CharField(blank=True, db_default='', max_length=128),
        ),
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveField(model_name='dispatcherstate', name='last_tick_at'),
                migrations.RemoveField(model_name='dispatcherstate', name='last_tick_owner'),
            ],
        ),
    ]
