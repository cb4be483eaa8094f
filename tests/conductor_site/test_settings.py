import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import environ
import pytest
from django.core.exceptions import ImproperlyConfigured

from conductor_site.config import OWNER_NAME, conductor_settings

ROOT = Path(__file__).resolve().parents[2]
DATA = Path("/srv/conductor-data")


def parse(**values):
    env = environ.Env()
    env.ENVIRON = {key: str(value) for key, value in values.items()}
    return conductor_settings(env, data_dir=DATA)


def test_defaults_match_the_spec():
    assert parse() == {
        "CONDUCTOR_WORKSPACE": DATA / "workspace",
        "CONDUCTOR_TICK_SECONDS": 2.0,
        "CONDUCTOR_SERVER_NAME": socket.gethostname(),
        "CONDUCTOR_MAX_TASKS_PER_TICK": 20,
        "CONDUCTOR_OUTBOUND_JITTER_MAX_MS": 800,
        "CONDUCTOR_RETRY_BACKOFF_SECONDS": (5, 15, 45),
        "CONDUCTOR_RETRY_JITTER_MAX_MS": 1000,
        "CONDUCTOR_MAX_ATTEMPTS": 3,
        "CONDUCTOR_PART_AWAY_MAX_MINUTES": 15,
        "CONDUCTOR_LEASE_SECONDS": 60,
        "CONDUCTOR_DELIVERY_TIMEOUT_SECONDS": 30,
        "CONDUCTOR_DELIVERY_METHODS": {},
        "CONDUCTOR_RESULT_MAX_CHARS": 20000,
        "CONDUCTOR_RESULT_STORE_MAX_BYTES": 1024 * 1024,
        "CONDUCTOR_PLUGIN_ORIGINS": (),
        "CONDUCTOR_MAX_INSTRUCTIONS_PER_HOUR": 120,
        "CONDUCTOR_MAIL_BETWEEN_OWNERS": frozenset(),
        "CONDUCTOR_MAX_FRAMES_PER_SECOND": 50,
        "CONDUCTOR_SHELL_MAX_TIMEOUT_SECONDS": 300,
        "CONDUCTOR_SHELL_UNCONFINED": False,
        "CONDUCTOR_MCP_MAX_TIMEOUT_SECONDS": 300,
        "CONDUCTOR_MCP_SERVERS": "",
        "CONDUCTOR_MCP_KEEP_ALIVE": True,
        "CONDUCTOR_MCP_ALLOW_PRIVATE_URLS": False,
        "CONDUCTOR_RETENTION_DAYS": 30,
        "CONDUCTOR_PING_INTERVAL_SECONDS": 20.0,
        "CONDUCTOR_HELLO_TIMEOUT_SECONDS": 10.0,
        "CONDUCTOR_SOCKET_MAX_MESSAGE_BYTES": 16 * 1024 * 1024,
        "CONDUCTOR_Q_WORKERS": 4,
        "CONDUCTOR_REDIS_MAX_CONNECTIONS": 100,
        "CONDUCTOR_Q_TIMEOUT_SECONDS": 300,
        "CONDUCTOR_METRICS_TOKEN": "",
        "CONDUCTOR_OLDEST_PLUGIN_VERSION": "1.0.0",
        "CONDUCTOR_CAPTURE_SILENCE_HOURS": 24.0,
    }


@pytest.mark.parametrize("value,parsed", [
    ("claude=http,dom;chatgpt=dom;gemini=http,dom",
     {"claude": ("http", "dom"), "chatgpt": ("dom",), "gemini": ("http", "dom")}),
    ("dom,http", {"*": ("dom", "http")}),
    (" dom ; chatgpt = dom ;", {"*": ("dom",), "chatgpt": ("dom",)}),
    ("", {}),
])
def test_delivery_methods_are_read_per_platform(value, parsed):
    assert parse(CONDUCTOR_DELIVERY_METHODS=value)["CONDUCTOR_DELIVERY_METHODS"] == parsed


@pytest.mark.parametrize("value,error", [
    ("bing=http", "unknown platform 'bing'; known: aistudio, chatgpt, claude, copilot, deepseek, gemini"),
    ("perplexity=http,dom", "'perplexity' is delivered only by dom"),
    ("claude=carrier-pigeon", "unknown delivery method 'carrier-pigeon'; known: http, dom"),
    ("claude=", "name at least one delivery method"),
    ("claude=http,http", "a delivery method is named twice"),
    ("claude=http;claude=dom", "'claude' is given twice"),
])
def test_a_wrong_delivery_method_setting_names_what_is_wrong(value, error):
    with pytest.raises(ImproperlyConfigured, match="CONDUCTOR_DELIVERY_METHODS") as raised:
        parse(CONDUCTOR_DELIVERY_METHODS=value)
    assert error in str(raised.value)


@pytest.mark.parametrize("value,pairs", [
    ("alice:bob", {("alice", "bob")}),
    (" alice : bob , carol.c:alice-2 ,", {("alice", "bob"), ("alice-2", "carol.c")}),
    ("bob:alice,alice:bob", {("alice", "bob")}),  # a pair has no direction
    ("", set()),
])
def test_mail_between_owners_is_read_as_unordered_pairs(value, pairs):
    parsed = parse(CONDUCTOR_MAIL_BETWEEN_OWNERS=value)["CONDUCTOR_MAIL_BETWEEN_OWNERS"]
    assert parsed == {frozenset(pair) for pair in pairs}


@pytest.mark.parametrize("value,error", [
    ("alice", "'alice' is not a pair of owners such as alice:bob"),
    ("alice:bob:carol", "'alice:bob:carol' is not a pair"),
    ("alice:", "'alice:' is not a pair"),
    ("Alice:bob", "'Alice:bob' is not a pair"),
    ("alice bob", "'alice bob' is not a pair"),
    ("alice:alice", "'alice:alice' pairs an owner with itself"),
])
def test_a_wrong_mail_between_owners_setting_names_what_is_wrong(value, error):
    with pytest.raises(ImproperlyConfigured, match="CONDUCTOR_MAIL_BETWEEN_OWNERS") as raised:
        parse(CONDUCTOR_MAIL_BETWEEN_OWNERS=value)
    assert error in str(raised.value)


def test_the_settings_owner_names_are_the_ones_a_client_may_have():
    from conversations.models import validate_owner

    assert OWNER_NAME.pattern == validate_owner.regex.pattern


def test_values_come_from_the_environment(tmp_path):
    parsed = parse(
        CONDUCTOR_WORKSPACE=tmp_path,
        CONDUCTOR_TICK_SECONDS="0.5",
        CONDUCTOR_RETRY_BACKOFF_SECONDS="1, 2,3",
        CONDUCTOR_PLUGIN_ORIGINS="https://a.example,https://b.example",
        CONDUCTOR_MAX_ATTEMPTS="5",
        CONDUCTOR_OUTBOUND_JITTER_MAX_MS="0",
    )
    assert parsed["CONDUCTOR_WORKSPACE"] == tmp_path.resolve()
    assert parsed["CONDUCTOR_TICK_SECONDS"] == 0.5
    assert parsed["CONDUCTOR_RETRY_BACKOFF_SECONDS"] == (1, 2, 3)
    assert parsed["CONDUCTOR_PLUGIN_ORIGINS"] == ("https://a.example", "https://b.example")
    assert parsed["CONDUCTOR_MAX_ATTEMPTS"] == 5
    assert parsed["CONDUCTOR_OUTBOUND_JITTER_MAX_MS"] == 0


@pytest.mark.parametrize(
    "name,value,message",
    [
        ("CONDUCTOR_MAX_ATTEMPTS", "0", "CONDUCTOR_MAX_ATTEMPTS must be at least 1"),
        ("CONDUCTOR_TICK_SECONDS", "0", "CONDUCTOR_TICK_SECONDS must be greater than 0"),
        ("CONDUCTOR_RETRY_BACKOFF_SECONDS", "5,soon", "comma-separated list"),
        ("CONDUCTOR_RETRY_BACKOFF_SECONDS", ",", "at least one"),
        ("CONDUCTOR_RETRY_JITTER_MAX_MS", "-1", "CONDUCTOR_RETRY_JITTER_MAX_MS must be at least 0"),
        # A cluster on its own runs the dispatcher loop in one worker; renewal needs a second.
        ("CONDUCTOR_Q_WORKERS", "1", "CONDUCTOR_Q_WORKERS must be at least 2"),
        ("CONDUCTOR_RESULT_STORE_MAX_BYTES", "1023", "CONDUCTOR_RESULT_STORE_MAX_BYTES must be at least 1024"),
        ("CONDUCTOR_OLDEST_PLUGIN_VERSION", "1.x", "CONDUCTOR_OLDEST_PLUGIN_VERSION must be a version"),
    ],
)
def test_bad_values_fail_naming_the_setting(name, value, message):
    with pytest.raises(ImproperlyConfigured, match=message):
        parse(**{name: value})


def test_bad_integer_fails_at_start_up():
    with pytest.raises(ValueError):
        parse(CONDUCTOR_LEASE_SECONDS="a minute")


def _run_settings(env, code):
    full_env = {key: value for key, value in os.environ.items() if key not in ("DATABASE_URL", "REDIS_URL")}
    full_env.update(env)
    result = subprocess.run(
        [sys.executable, "-c", "import django; django.setup(); from django.conf import settings; " + code],
        cwd=ROOT, env={**full_env, "DJANGO_SETTINGS_MODULE": "conductor_site.settings"},
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_embedded_default_is_sqlite_in_the_data_folder_with_the_orm_broker(tmp_path):
    out = _run_settings(
        {"CONDUCTOR_DATA_DIR": str(tmp_path)},
        "import json; db = settings.DATABASES['default']; print(json.dumps({'engine': db['ENGINE'], "
        "'name': str(db['NAME']), 'mode': db['OPTIONS']['transaction_mode'], 'q': settings.Q_CLUSTER, "
        "'debug': settings.DEBUG, 'workspace': str(settings.CONDUCTOR_WORKSPACE)}))",
    )
    values = json.loads(out)
    assert values["engine"] == "conductor_site.db.sqlite3"
    assert values["name"] == str(tmp_path / "conductor.sqlite3")
    assert values["mode"] == "IMMEDIATE"
    assert values["q"]["orm"] == "default" and "redis" not in values["q"]
    assert (values["q"]["workers"], values["q"]["timeout"], values["q"]["retry"]) == (4, 300, 360)
    assert values["debug"] is False
    assert values["workspace"] == str(tmp_path / "workspace")
    assert (tmp_path / "secret_key").stat().st_mode & 0o077 == 0


def test_redis_url_and_database_url_switch_the_backends(tmp_path):
    out = _run_settings(
        {
            "CONDUCTOR_DATA_DIR": str(tmp_path),
            "DATABASE_URL": "postgres://postgres@127.0.0.1:5432/conductor",
            "REDIS_URL": "redis://127.0.0.1:6379/3",
        },
        "import json; print(json.dumps({'engine': settings.DATABASES['default']['ENGINE'], "
        "'q': settings.Q_CLUSTER}))",
    )
    values = json.loads(out)
    assert values["engine"] == "conductor_site.db.postgresql"
    assert values["q"]["redis"] == "redis://127.0.0.1:6379/3" and "orm" not in values["q"]


@pytest.mark.parametrize("https_only", ["false", "true"], ids=["loopback", "behind-tls"])
def test_check_deploy_is_clean_with_debug_off_a_real_key_and_hosts(tmp_path, https_only):
    env = {key: value for key, value in os.environ.items() if key not in ("DATABASE_URL", "REDIS_URL")}
    env.update(
        CONDUCTOR_DATA_DIR=str(tmp_path),
        DEBUG="false",
        SECRET_KEY="k7#" + "q8Zr2vLm9Tn4Xw6Yp1Bs5Cd3Fg7Hj0Kl" * 2,
        ALLOWED_HOSTS="conductor.example.com",
        HTTPS_ONLY=https_only,
    )
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout


# --- file modes: the data folder holds session keys and the secret key -----------------------

MODES_AFTER_MIGRATE = (
    "import json, os, stat; from django.core.management import call_command; "
    "from django.db import connections; "
    "call_command('migrate_all', verbosity=0); "
    # Hold a write open on each database so that its -wal and -shm files exist while we look.
    "[connections[alias].cursor().execute('CREATE TABLE IF NOT EXISTS mode_probe (x INTEGER)') "
    " for alias in settings.DATABASES]; "
    "root = settings.DATA_DIR; "
    "print(json.dumps({str(path.relative_to(root)) or '.': oct(stat.S_IMODE(path.stat().st_mode)) "
    " for path in [root, *root.iterdir()]}))"
)


def _run_with_umask_022(env, code):
    """`_run_settings` under the usual umask, which would leave new files readable by everyone."""
    old = os.umask(0o022)
    try:
        return json.loads(_run_settings(env, code).splitlines()[-1])
    finally:
        os.umask(old)


def test_a_new_data_folder_and_its_databases_are_private(tmp_path):
    data = tmp_path / "data"
    modes = _run_with_umask_022({"CONDUCTOR_DATA_DIR": str(data)}, MODES_AFTER_MIGRATE)
    assert modes["."] == "0o700"
    for name in ("conductor.sqlite3", "channels.sqlite3"):
        for suffix in ("", "-wal", "-shm"):
            assert modes[name + suffix] == "0o600", (name + suffix, modes)
    assert modes["secret_key"] == "0o600"


def test_an_existing_data_folder_and_its_files_are_made_private(tmp_path):
    data = tmp_path / "data"
    data.mkdir(mode=0o755)
    data.chmod(0o755)
    for name in ("conductor.sqlite3", "conductor.sqlite3-wal", "secret_key"):
        (data / name).touch()
        (data / name).chmod(0o644)
    (data / "secret_key").write_text("k" * 50)
    modes = _run_with_umask_022({"CONDUCTOR_DATA_DIR": str(data)}, MODES_AFTER_MIGRATE)
    assert modes["."] == "0o700"
    assert {modes[name] for name in ("conductor.sqlite3", "conductor.sqlite3-wal", "secret_key")} == {"0o600"}
    assert (data / "secret_key").read_text() == "k" * 50
