"""The README and the documentation site say what is true: commands that exist, pages in the nav, frames the server speaks."""

import ast
import json
import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest
from django.core.management import get_commands

from ingest.consumers import PluginConsumer
from ingest.protocol import CloseCode, ErrorCode
from pipelines.delivery_methods import delivery_methods
from tests.server import ROOT

pytestmark = pytest.mark.database_free

README = ROOT / "README.md"
DOCS = ROOT / "docs"
# Every page a reader may follow a command from: the README, the site's pages
# and the files the site includes as they are.
DOCUMENTS = [README, ROOT / "ARCHITECTURE.md", ROOT / "bench" / "README.md", ROOT / "plugin" / "README.md",
             ROOT / "automation" / "README.md", *sorted(DOCS.glob("*.md"))]
# A shell as a new user opens it: no ~/.local/bin, where `make` may have put uv.
FRESH_PATH = "/usr/local/bin:/usr/bin:/bin"


def code_of(path: Path) -> list[str]:
    """The inline code spans and the fenced code lines of a Markdown file: where commands are written."""
    text = path.read_text()
    fenced = re.findall(r"^ *(`{3,}|~{3,})[^\n]*\n(.*?)^ *\1", text, flags=re.S | re.M)
    lines = [line for _, body in fenced for line in body.splitlines()]
    return lines + re.findall(r"`([^`\n]+)`", text)


def makefile_targets() -> set[str]:
    return set(re.findall(r"^([a-z][a-z-]*):", (ROOT / "Makefile").read_text(), flags=re.M))


def named(pattern: str) -> dict[str, set[str]]:
    """``{name: files naming it}`` for every match of ``pattern``'s group in the documents' code."""
    found: dict[str, set[str]] = {}
    for path in DOCUMENTS:
        for code in code_of(path):
            for name in re.findall(pattern, code):
                found.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    return found


def readme_shell_commands() -> list[str]:
    """Each command of the README's ``sh`` blocks, comments stripped."""
    blocks = re.findall(r"^```sh\n(.*?)^```", README.read_text(), flags=re.S | re.M)
    commands = [line.split("#", 1)[0].strip() for block in blocks for line in block.splitlines()]
    return [command for command in commands if command]


def test_the_readme_fits_on_a_screen_or_two():
    assert len(README.read_text().splitlines()) <= 150


def test_every_make_target_the_docs_name_exists():
    targets = makefile_targets()
    mentioned = named(r"(?:^|[\s;(])make ([a-z][a-z-]*)")
    assert {"run", "test", "docs", "user"} <= mentioned.keys()
    assert {name: files for name, files in mentioned.items() if name not in targets} == {}


def test_every_manage_py_command_the_docs_name_exists():
    commands = get_commands()
    mentioned = named(r"manage\.py ([a-z_]+)")
    assert {"demo", "tool_guide", "create_plugin_client", "configuration_doc"} <= mentioned.keys()
    assert {name: files for name, files in mentioned.items() if name not in commands} == {}


def test_the_readmes_shell_commands_work_as_written_in_a_fresh_shell():
    """Each runs in its safe form: ``make -n`` for make, ``--help`` for a manage.py command."""
    env = {key: value for key, value in os.environ.items() if key != "PATH"} | {"PATH": FRESH_PATH}
    commands = readme_shell_commands()
    assert any(command.startswith("make ") for command in commands)
    assert any(".venv/bin/python manage.py" in command for command in commands)
    for command in commands:
        words = shlex.split(command)
        if words[0] == "make":
            safe = ["make", "-n", "--no-print-directory", *words[1:]]
        elif words[:2] == [".venv/bin/python", "manage.py"]:
            safe = [*words[:3], "--help"]
        else:
            pytest.fail(f"the README's command {command!r} has no safe form here: add one")
        result = subprocess.run(safe, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, f"{command!r} ({' '.join(safe)}): {result.stderr[-2000:]}"


def test_the_readmes_links_lead_to_files_that_exist():
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README.read_text())
    assert links
    assert [link for link in links if "://" not in link and not (ROOT / link).exists()] == []


def test_every_page_of_the_docs_is_in_the_nav():
    nav = set(re.findall(r":\s*([a-z0-9-]+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(), flags=re.M))
    pages = {path.name for path in DOCS.glob("*.md")}
    assert pages == nav


def test_the_site_includes_the_files_that_stay_where_they_are():
    """ARCHITECTURE.md, bench/README.md and plugin/README.md are included as they are, not copied."""
    includes = {
        "architecture.md": "ARCHITECTURE.md",
        "benchmarks.md": "bench/README.md",
        "plugin-internals.md": "plugin/README.md",
    }
    for page, source in includes.items():
        assert f'--8<-- "{source}"' in (DOCS / page).read_text()
        assert (ROOT / source).exists()
    # A missing include fails the build instead of leaving a hole.
    assert "check_paths: true" in (ROOT / "mkdocs.yml").read_text()


def test_the_protocol_page_names_every_frame_error_and_close_code_the_server_speaks():
    page = (DOCS / "protocol.md").read_text()
    for frame_type in PluginConsumer.frame_handlers:
        assert f"`{frame_type}`" in page, frame_type
    for name, code in vars(ErrorCode).items():
        if name.isupper():
            assert f"`{code}`" in page, code
    for name, code in vars(CloseCode).items():
        if name.isupper():
            assert f"`{code}`" in page, code


FENCE = re.compile(r"^```([a-z]*)\n(.*?)^```$", flags=re.S | re.M)


def protocol_sections() -> dict[str, str]:
    """``{frame type: its section}`` for each heading of docs/protocol.md that is one frame type in backticks.

    A section runs to the next heading of any level up to three; headings
    inside code blocks do not count.
    """
    page = (DOCS / "protocol.md").read_text()
    fenced = [match.span() for match in FENCE.finditer(page)]
    headings = [
        match for match in re.finditer(r"^#{1,3} (.*)$", page, flags=re.M)
        if not any(start <= match.start() < end for start, end in fenced)
    ]
    sections = {}
    for heading, following in zip(headings, [*headings[1:], None]):
        if name := re.fullmatch(r"`([a-z_.]+)`", heading.group(1).strip()):
            sections[name.group(1)] = page[heading.end():following.start() if following else len(page)]
    return sections


def json_examples(text: str) -> list[str]:
    return [body for language, body in FENCE.findall(text) if language == "json"]


def frame_types_the_server_sends() -> set[str]:
    """The ``type`` of every frame dict the ``ingest`` package writes, and of each delivery method's frame.

    Found in the source, so that a frame added anywhere in ``ingest`` is
    found too. Dicts that are ASGI messages (``websocket.*``) or channel-layer
    messages (a type a ``PluginConsumer`` method handles, ``plugin.deliver``)
    are not frames. The simulator's frames are the plugin's, documented too.
    """
    types = set()
    for path in (ROOT / "ingest").rglob("*.py"):
        if "migrations" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Dict):
                continue
            for key, value in zip(node.keys, node.values):
                if (isinstance(key, ast.Constant) and key.value == "type"
                        and isinstance(value, ast.Constant) and isinstance(value.value, str)):
                    types.add(value.value)
    frames = {name for name in types
              if not name.startswith("websocket.") and not hasattr(PluginConsumer, name.replace(".", "_"))}
    return frames | {method.frame_type for method in delivery_methods}


def test_the_frame_types_are_found_where_they_are_written():
    sent = frame_types_the_server_sends()
    assert {"hello.ok", "ack", "error", "instruction.status", "sites", "browser.proxy_delivery",
            "browser.dom_delivery"} <= sent
    assert not sent & {"plugin.deliver", "plugin.status", "websocket.close"}
    assert {"hello", "browser.final_message", "status.get", "sites.get"} <= PluginConsumer.frame_handlers.keys()


def test_every_frame_both_ways_has_a_section_with_json_examples_of_its_type():
    """A frame type the consumer takes or the server sends, without its section and example, fails here."""
    sections = protocol_sections()
    for frame_type in sorted({*PluginConsumer.frame_handlers, *frame_types_the_server_sends()}):
        assert frame_type in sections, f"docs/protocol.md has no section headed ### `{frame_type}`"
        examples = json_examples(sections[frame_type])
        assert examples, f"the section of {frame_type} has no ```json example"
        for example in examples:
            assert json.loads(example).get("type") == frame_type, example


def test_every_json_example_of_the_protocol_page_is_json():
    """The page's other examples too (a frame written out in prose); none sends the reader elsewhere for the spec."""
    page = (DOCS / "protocol.md").read_text()
    examples = json_examples(page)
    assert len(examples) >= len(protocol_sections())
    for example in examples:
        assert isinstance(json.loads(example), dict), example
    assert "SPEC" not in page


def test_the_options_page_names_the_command_the_docs_show():
    command = re.search(r'<code id="create-client">([^<]+)</code>', (ROOT / "plugin/options/options.html").read_text())
    assert command.group(1) == ".venv/bin/python manage.py create_plugin_client NAME"
    assert '.venv/bin/python manage.py create_plugin_client "laptop chrome"' in (DOCS / "getting-started.md").read_text()
