import pytest

from automation.kinds import (
    DuplicateKind,
    KindRegistry,
    KindSpec,
    UnknownKind,
    always,
    kinds,
)
from automation.services.tasks import task_create
from ingest.kinds import INSTRUCTION_DELIVER, INSTRUCTION_EXECUTE
from pipelines.mail import MAIL_DELIVER
from pipelines.renewal import RENEWAL_DELIVER
from tests.factories import make_task


def test_the_spec_kinds_are_registered_with_their_policies():
    policies = {
        spec.name: (spec.is_outbound, spec.lane, spec.is_guarded)
        for spec in kinds if not spec.name.startswith("test.")
    }
    assert policies == {
        INSTRUCTION_EXECUTE: (False, "instructions", True),
        INSTRUCTION_DELIVER: (True, "outbound", False),
        RENEWAL_DELIVER: (True, "outbound", False),
        MAIL_DELIVER: (True, "outbound", False),
    }


def test_the_spec_kinds_say_how_the_console_shows_them():
    displays = {
        spec.name: (
            kinds.noun(spec.name), spec.display.is_block, spec.display.heading is not None,
            spec.display.is_shown_to_sender, spec.display.details_title,
        )
        for spec in kinds if not spec.name.startswith("test.")
    }
    assert displays == {
        INSTRUCTION_EXECUTE: ("instruction", True, False, False, ""),
        INSTRUCTION_DELIVER: ("delivery of results", False, True, False, ""),
        RENEWAL_DELIVER: ("renewal", False, False, False, ""),
        MAIL_DELIVER: ("mail", False, True, True, "Mail"),
    }
    # A kind no longer registered (old rows) is shown by its name, with the defaults.
    assert (kinds.noun("gone.kind"), kinds.display("gone.kind").is_block) == ("gone.kind", False)


def test_duplicate_and_unknown_kinds_raise_clear_errors():
    registry = KindRegistry()
    spec = KindSpec(name="x", lane=None, is_idempotent=always)
    registry.register(spec)
    with pytest.raises(DuplicateKind):
        registry.register(spec)
    with pytest.raises(UnknownKind, match="unknown task kind 'y'; registered: x"):
        registry.get("y")


def test_only_kinds_with_an_executor_are_runnable():
    def run(ctx):
        return None

    registry = KindRegistry()
    registry.register(KindSpec(name="x", lane=None, is_idempotent=always))
    assert registry.runnable() == []
    registry.register(KindSpec(name="y", lane=None, is_idempotent=always, executor=run))
    assert registry.runnable() == ["y"] and registry.get("y").executor is run


@pytest.mark.django_db
def test_creating_a_task_of_an_unknown_kind_raises():
    with pytest.raises(UnknownKind):
        task_create(kind="nope", payload={}, actor="test")


@pytest.mark.django_db
@pytest.mark.parametrize("kind", [INSTRUCTION_DELIVER, RENEWAL_DELIVER, "test.outbound"])
def test_guardrails_never_apply_to_deliveries(kind):
    with pytest.raises(ValueError, match="never held for approval"):
        task_create(kind=kind, payload={}, actor="ingest", status="blocked")


@pytest.mark.django_db
@pytest.mark.parametrize(
    "tool,idempotent",
    [("files.read", True), ("echo", True), ("shell.run", False), ("files.write", False), ("nope", False)],
)
def test_an_instruction_is_idempotent_when_its_tool_is(tool, idempotent):
    task = make_task(kind=INSTRUCTION_EXECUTE)
    task.payload_json = f'{{"tool": "{tool}", "target": "conductor"}}'
    assert kinds.get(INSTRUCTION_EXECUTE).is_idempotent(task) is idempotent
