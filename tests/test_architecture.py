"""The layers of ARCHITECTURE.md, and pipelines reading through selectors, as import-linter checks them
(the contracts in pyproject.toml)."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def layers():
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    [contract] = [c for c in config["contracts"] if c["id"] == "layers"]
    return config["root_packages"], contract["layers"]


def lint_imports(tree: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--config", str(tree / "pyproject.toml")],
        cwd=tree, env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, timeout=120,
    )


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    """A copy of the project's packages, to break on purpose."""
    copy = tmp_path_factory.mktemp("tree")
    packages, _ = layers()
    for package in packages:
        shutil.copytree(ROOT / package, copy / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", copy / "pyproject.toml")
    return copy


def test_every_package_of_the_project_has_its_layer():
    packages, contract_layers = layers()
    in_layers = {name.strip() for layer in contract_layers for name in layer.split("|")}
    assert in_layers == set(packages)
    on_disk = {path.parent.name for path in ROOT.glob("*/__init__.py")} - {"tests", "bench"}  # not the product
    assert on_disk == set(packages)


def test_the_project_keeps_its_layers(tree):
    import tomllib

    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    result = lint_imports(tree)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{len(contracts)} kept, 0 broken" in result.stdout


@pytest.mark.parametrize(
    ("module", "imports", "broken"),
    [
        # A read that writes, or a room that reaches up to the socket, is refused.
        ("ingest/panel/selectors.py", "from ingest.panel import services", "frame handler BROKEN"),
        ("ingest/sites/frames.py", "from ingest.consumers import PluginConsumer", "registers frames on it BROKEN"),
    ],
)
def test_ingest_s_rooms_keep_their_contracts(tree, module, imports, broken):
    result = lint_imports_with(tree, module, imports)
    assert result.returncode == 1
    assert broken in " ".join(result.stdout.split())


@pytest.mark.parametrize(
    ("module", "imports", "refusal"),
    [
        # The engine knows no kind's pipeline and no plugin edge.
        ("automation/dispatcher.py", "from pipelines import deliveries", "automation is not allowed to import pipelines"),
        ("automation/services/claim.py", "from ingest.models import PluginClient",
         "automation is not allowed to import ingest"),
        # Conversations sit below the engine; helpers below everything.
        ("conversations/services.py", "from automation.wake import dispatcher_wake",
         "conversations is not allowed to import automation"),
        ("core/logfmt.py", "import conductor_site.settings", "core is not allowed to import conductor_site"),
        # Tools and platforms are independent of each other.
        ("tools/registry.py", "import platforms", "tools is not allowed to import platforms"),
    ],
)
def test_a_lower_layer_importing_a_higher_one_breaks_the_contract(tree, module, imports, refusal):
    result = lint_imports_with(tree, module, imports)
    assert result.returncode == 1
    assert refusal in result.stdout


def lint_imports_with(tree: Path, module: str, imports: str) -> subprocess.CompletedProcess:
    """``lint_imports`` with ``imports`` planted in ``module`` of the copy, then taken out again."""
    path = tree / module
    original = path.read_text()
    # Inside a function, as lazy imports that hid cycles were: they count too.
    path.write_text(original + f"\n\ndef _breach():\n    {imports}\n")
    try:
        return lint_imports(tree)
    finally:
        path.write_text(original)


@pytest.mark.parametrize(
    ("module", "imports"),
    [
        ("pipelines/deliveries.py", "from conversations.models import Message"),
        ("pipelines/mail.py", "from ingest.models import Instruction"),
        ("pipelines/results_text.py", "import automation.models"),
    ],
)
def test_a_pipeline_reading_another_apps_models_breaks_the_contract(tree, module, imports):
    result = lint_imports_with(tree, module, imports)
    assert result.returncode == 1
    assert "never their models BROKEN" in " ".join(result.stdout.split())
