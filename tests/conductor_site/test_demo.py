"""The demo command's first impression: a refused connection says how to point it elsewhere."""

import pytest
from django.conf import settings as django_settings
from django.core.management import CommandError, call_command

pytestmark = pytest.mark.django_db


def test_a_refused_connection_suggests_the_url_option(tmp_path, settings):
    settings.CONDUCTOR_WORKSPACE = str(tmp_path)
    with pytest.raises(CommandError, match=r"--url ws://HOST:PORT/ws/plugin/"):
        call_command("demo", url="ws://127.0.0.1:9/ws/plugin/", timeout=1)


def test_the_fixtures_first_block_lists_the_folder_the_demo_seeds():
    first = (django_settings.BASE_DIR / "fixtures" / "claude.jsonl").read_text().splitlines()[1]
    assert r'files.list\n{\"path\": \"notes\"' in first
