"""STYLE rule 4 as a check: no code compares a task's kind with a kind's name outside the kind registry.

What differs between kinds is said by their ``KindSpec`` (``automation.kinds``):
code that needs to know asks the spec. A comparison against a kind's name, as a
literal (``"mail.deliver"``) or as the constant that holds it (``MAIL_DELIVER``,
``instructions.INSTRUCTION_EXECUTE``), alone or in a tuple, list or set, is the
start of a ladder that a new kind would have to find and extend.
"""

import ast
from pathlib import Path

from automation.kinds import kinds
from tests.test_architecture import ROOT, layers

# The registry itself may name kinds; nothing else in the product does.
REGISTRIES = {Path("automation/kinds.py")}
COMPARISONS = (ast.Eq, ast.NotEq, ast.In, ast.NotIn, ast.Is, ast.IsNot)


def product_modules() -> dict[Path, str]:
    packages, _ = layers()
    return {
        path.relative_to(ROOT): path.read_text()
        for package in packages
        for path in sorted((ROOT / package).rglob("*.py"))
        if "migrations" not in path.parts
    }


def kind_constants(sources: dict[Path, str], names: set[str]) -> set[str]:
    """The module-level constants whose value is a kind's name (``MAIL_DELIVER = "mail.deliver"``)."""
    found = set()
    for source in sources.values():
        for node in ast.parse(source).body:
            if (
                isinstance(node, ast.Assign)
                and isinstance(node.value, ast.Constant)
                and node.value.value in names
            ):
                found.update(target.id for target in node.targets if isinstance(target, ast.Name))
    return found


def _names_a_kind(node: ast.expr, names: set[str], constants: set[str]) -> bool:
    match node:
        case ast.Constant(value=str() as value):
            return value in names
        case ast.Name(id=name) | ast.Attribute(attr=name):
            return name in constants
        case ast.Tuple(elts=items) | ast.List(elts=items) | ast.Set(elts=items):
            return any(_names_a_kind(item, names, constants) for item in items)
    return False


def kind_name_comparisons(source: str, *, names: set[str], constants: set[str]) -> list[tuple[int, str]]:
    """Each comparison in ``source`` with a kind's name on either side: (line, the comparison's text)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare) or not any(isinstance(op, COMPARISONS) for op in node.ops):
            continue
        if any(_names_a_kind(side, names, constants) for side in [node.left, *node.comparators]):
            found.append((node.lineno, ast.get_source_segment(source, node)))
    return found


def _facts():
    sources = product_modules()
    names = set(kinds.names())
    return sources, names, kind_constants(sources, names)


def test_the_check_knows_the_kinds_and_their_constants():
    _, names, constants = _facts()
    assert {"instruction.execute", "instruction.deliver", "renewal.deliver", "mail.deliver"} <= names
    assert {"INSTRUCTION_EXECUTE", "INSTRUCTION_DELIVER", "RENEWAL_DELIVER", "MAIL_DELIVER"} <= constants


def test_no_code_compares_a_kind_with_a_kinds_name_outside_the_registry():
    sources, names, constants = _facts()
    found = {
        f"{path}:{line}: {text}"
        for path, source in sources.items()
        if path not in REGISTRIES
        for line, text in kind_name_comparisons(source, names=names, constants=constants)
    }
    assert found == set()


def test_the_check_finds_a_planted_comparison():
    _, names, constants = _facts()
    planted = (
        "from pipelines import mail\n"
        "from pipelines.mail import MAIL_DELIVER\n"
        "def heading(task, kind):\n"
        "    if task.kind == MAIL_DELIVER:\n"
        "        return 'mail'\n"
        "    if kind != 'instruction.deliver':\n"
        "        return 'other'\n"
        "    if task.kind in (mail.MAIL_DELIVER, 'renewal.deliver'):\n"
        "        return 'outbound'\n"
        "    return 'renewal' if 'renewal.deliver' == kind else kind\n"
    )
    found = kind_name_comparisons(planted, names=names, constants=constants)
    assert [line for line, _ in found] == [4, 6, 8, 10]
    # Kinds of other things (a JSON type, an MCP content type, a story entry) are not task kinds.
    unrelated = "if kind == 'array' or entry.kind == 'message' or kind in ('image', 'audio'):\n    pass\n"
    assert kind_name_comparisons(unrelated, names=names, constants=constants) == []


# --- every log line an event ---------------------------------------------------------------

LOG_METHODS = {"debug", "info", "warning", "error", "exception", "critical", "log"}


def plain_log_calls(source: str) -> list[int]:
    """Lines calling ``logger.<level>(...)`` directly instead of ``log_event(logger, action, ...)``."""
    return [
        node.lineno for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in LOG_METHODS
        and isinstance(node.func.value, ast.Name) and node.func.value.id == "logger"
    ]


def test_product_code_logs_only_through_log_event():
    # core/logfmt.py is where log_event itself calls the logger.
    found = {
        str(path): lines for path, source in product_modules().items()
        if path != Path("core/logfmt.py") and (lines := plain_log_calls(source))
    }
    assert found == {}


def test_the_log_check_finds_a_plain_call():
    assert plain_log_calls('import logging\nlogger = logging.getLogger(__name__)\nlogger.warning("x %s", 1)\n') == [3]


def test_outcomes_know_no_transition_service():
    """What an executor returns and gets is data: the dispatcher, not ``automation.outcomes``, moves tasks."""
    source = (ROOT / "automation" / "outcomes.py").read_text()
    imported = {
        node.module for node in ast.walk(ast.parse(source)) if isinstance(node, ast.ImportFrom) and node.module
    }
    assert not {module for module in imported if module.startswith("automation.services")}
