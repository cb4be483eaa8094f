"""docs/operations.md shows the deploy files as they are, and every alert with its expression."""

from __future__ import annotations

import re

import pytest

from tests.deploy.tools import NGINX_SITE, OPERATIONS, ROOT, SYSTEMD, alert_expr, alert_rules

pytestmark = pytest.mark.database_free


def fenced_block_after(text: str, marker: str) -> str:
    """The body of the first fenced code block after ``marker``."""
    rest = text[text.index(marker):]
    match = re.search(r"^```\w*\n(.*?)^```$", rest, flags=re.MULTILINE | re.DOTALL)
    return match.group(1)


def test_the_systemd_unit_and_the_nginx_site_in_the_doc_are_the_files():
    doc = OPERATIONS.read_text()
    assert fenced_block_after(doc, "`deploy/systemd/conductor.service`:") == (SYSTEMD / "conductor.service").read_text()
    assert fenced_block_after(doc, "`deploy/nginx/conductor.conf`, to install as") == NGINX_SITE.read_text()


def test_every_deploy_file_the_doc_names_exists():
    named = set(re.findall(r"(?<![\w/])(?:tests/)?deploy/[\w./-]*\w", OPERATIONS.read_text()))
    assert named
    for path in named:
        assert (ROOT / path).exists(), path


@pytest.mark.parametrize("name", list(alert_rules()))
def test_every_alert_is_in_the_docs_table_with_its_expression(name):
    rows = [line for line in OPERATIONS.read_text().splitlines() if line.startswith(f"| `{name}` |")]
    assert len(rows) == 1, f"{name} is not in docs/operations.md's table of alerts"
    expression = f"`{alert_expr(alert_rules()[name])}`"
    assert expression in rows[0].split(" | ")
