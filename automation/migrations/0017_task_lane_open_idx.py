from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('automation', '0016_dispatcherstate_pause_only'),
    ]

    operations = [
        migrations.AddIndex(
            model_name='automationtask',
            index=models.Index(condition=models.Q(('status__in', ['blocked', 'leased', 'pending', 'retry_wait', 'running'])), fields=['conversation', 'lane', 'sequence'], name='task_lane_open_idx'),
        ),
    ]
