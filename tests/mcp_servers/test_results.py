"""Rendering an MCP call's result for the chat (SPEC §5.4): pure."""

import base64

import pytest

from tools.mcp_results import mcp_error_text, mcp_result_render

pytestmark = pytest.mark.database_free

PNG = base64.b64encode(b"\x89PNG" + b"\0" * 96).decode()


@pytest.mark.parametrize(("wire", "rendered"), [
    ({"content": [{"type": "text", "text": "Echo: hi"}]}, {"content": [{"type": "text", "text": "Echo: hi"}]}),
    ({"content": [{"type": "image", "data": PNG, "mimeType": "image/png"}]},
     {"content": [{"type": "image", "mimeType": "image/png", "bytes": 100}]}),
    ({"content": [{"type": "audio", "data": "!!", "mimeType": "audio/wav"}]},
     {"content": [{"type": "audio", "mimeType": "audio/wav", "bytes": None}]}),
    ({"content": [{"type": "resource", "resource": {"uri": "demo://r/1", "mimeType": "text/plain", "text": "x"}}]},
     {"content": [{"type": "resource", "uri": "demo://r/1", "mimeType": "text/plain"}]}),
    ({"content": [{"type": "resource_link", "uri": "file:///a", "name": "a"}]},
     {"content": [{"type": "resource_link", "uri": "file:///a", "name": "a", "mimeType": None}]}),
    ({"content": [], "structuredContent": {"temperature": 21}},
     {"content": [], "structuredContent": {"temperature": 21}}),
    ({"content": [{"type": "novel"}]}, {"content": [{"type": "novel"}]}),
    ({}, {"content": []}),
])
def test_content_is_rendered_without_bytes(wire, rendered):
    assert mcp_result_render(wire) == rendered


def test_an_error_is_its_first_text_on_one_line_and_capped():
    assert mcp_error_text({"content": [{"type": "image"}, {"type": "text", "text": "bad\n  city"}]}) == "bad city"
    assert len(mcp_error_text({"content": [{"type": "text", "text": "x" * 9000}]})) == 500
    assert "without a text" in mcp_error_text({"content": []})
