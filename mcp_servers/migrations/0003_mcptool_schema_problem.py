from django.db import migrations, models
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from jsonschema.validators import validator_for


def check_listed_schemas(apps, schema_editor):
    """Each tool listed before: its schema checked now, once, rather than by every process that uses it."""
    McpTool = apps.get_model("mcp_servers", "McpTool")
    for tool in McpTool.objects.using(schema_editor.connection.alias).filter(schema_problem=None).iterator():
        schema = tool.input_schema or {"type": "object"}
        try:
            validator_for(schema, default=Draft202012Validator).check_schema(schema)
            tool.schema_problem = ""
        except SchemaError as exc:
            tool.schema_problem = exc.message
        tool.save(update_fields=["schema_problem"])


class Migration(migrations.Migration):

    dependencies = [
        ('mcp_servers', '0002_mcpserver_writable'),
    ]

    operations = [
        migrations.AddField(
            model_name='mcptool',
            name='schema_problem',
            field=models.TextField(blank=True, help_text='Why its input schema is not valid JSON Schema, checked when listed: empty when it is; null when not checked (listed before the check was stored; checked when used).', null=True),
        ),
        migrations.RunPython(check_listed_schemas, migrations.RunPython.noop),
    ]
