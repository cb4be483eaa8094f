"""docs/configuration.md lists every setting the code reads, with the defaults the code uses, and is never stale."""

import ast
import json
import os
import subprocess
import sys

import pytest
from django.core.management import CommandError, call_command

from conductor_site.settings_reference import SETTINGS, configuration_markdown
from tests.server import ROOT

pytestmark = pytest.mark.database_free

SETTINGS_MODULES = [ROOT / "conductor_site" / "settings.py", ROOT / "conductor_site" / "config.py"]
# Commands that read HOST and PORT as `make run` passes them on.
COMMAND_MODULES = [*(ROOT / "conductor_site" / "management" / "commands").glob("*.py"),
                   *(ROOT / "ingest" / "management" / "commands").glob("*.py")]
DOCUMENTED = {setting.name for setting in SETTINGS}


def _first_string(call: ast.Call) -> str | None:
    for arg in call.args:
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            return arg.value
    return None


def _is_env(node: ast.AST) -> bool:
    return isinstance(node, ast.Name) and node.id in ("env", "environ")


def names_read(path) -> set[str]:
    """The environment variables a module reads.

    ``env.<parser>("NAME", ...)``, ``os.environ.get("NAME")``, helpers called
    with ``env`` (``_positive_int(env, "NAME", ...)``), and any string constant
    that is a ``CONDUCTOR_*`` name (a helper keeps its name in a variable).
    """
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            func = node.func
            reads_env = (
                isinstance(func, ast.Attribute) and (_is_env(func.value) or (
                    isinstance(func.value, ast.Attribute) and func.value.attr == "environ"))
            ) or any(_is_env(arg) for arg in node.args)
            if reads_env and (name := _first_string(node)) and name.isupper():
                names.add(name)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if node.value.startswith("CONDUCTOR_") and node.value.replace("_", "").isalnum():
                names.add(node.value)
    return names


def test_the_page_is_what_the_table_gives():
    call_command("configuration_doc", "--check")
    assert (ROOT / "docs" / "configuration.md").read_text() == configuration_markdown()


def test_a_stale_page_fails_the_check_and_is_rewritten(tmp_path):
    page = tmp_path / "configuration.md"
    page.write_text(configuration_markdown().replace("CONDUCTOR_TICK_SECONDS", "CONDUCTOR_TOCK_SECONDS"))
    with pytest.raises(CommandError, match="stale"):
        call_command("configuration_doc", "--check", "--path", str(page))
    call_command("configuration_doc", "--path", str(page))
    assert page.read_text() == configuration_markdown()
    call_command("configuration_doc", "--check", "--path", str(page))


def test_every_setting_the_settings_module_reads_is_documented():
    read = set().union(*(names_read(path) for path in SETTINGS_MODULES))
    assert {"CONDUCTOR_TICK_SECONDS", "CONDUCTOR_RETRY_BACKOFF_SECONDS", "DATABASE_URL", "AXES_COOLOFF_MINUTES"} <= read
    assert read - DOCUMENTED == set()


def test_every_documented_setting_is_read_somewhere():
    read = set().union(*(names_read(path) for path in [*SETTINGS_MODULES, *COMMAND_MODULES]))
    assert {"HOST", "PORT"} <= read
    assert DOCUMENTED - read == set()


def test_the_names_are_unique():
    assert len(DOCUMENTED) == len(SETTINGS)


def _settings_with(tmp_path, values: dict[str, str]) -> dict[str, str]:
    """Every upper-case name of the settings module, as repr, in a process of its own with only ``values`` set."""
    env = {key: value for key, value in os.environ.items() if key not in DOCUMENTED}
    env |= {"CONDUCTOR_DATA_DIR": str(tmp_path), **values}
    code = (
        "import json, conductor_site.settings as s; "
        "print(json.dumps({k: repr(v) for k, v in vars(s).items() if k.isupper()}))"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_setting_each_documented_default_changes_nothing(tmp_path):
    defaults = {setting.name: setting.default for setting in SETTINGS if setting.default is not None}
    assert "CONDUCTOR_RETRY_BACKOFF_SECONDS" in defaults
    # With HTTPS_ONLY its own settings are read too: compare both ways.
    for https_only in ({}, {"HTTPS_ONLY": "true"}):
        unset = _settings_with(tmp_path, https_only)
        explicit = _settings_with(tmp_path, defaults | https_only)
        assert {name: (unset.get(name), explicit.get(name)) for name in unset.keys() | explicit.keys()
                if unset.get(name) != explicit.get(name)} == {}
