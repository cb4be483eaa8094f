"""Every benchmark script starts: its imports resolve and ``--help`` answers (``make bench`` and the soak run them)."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LIBRARIES = {"__init__.py", "common.py", "processes.py", "goals.py", "suite_phases.py", "soak_tally.py"}
SCRIPTS = sorted(path.name for path in (ROOT / "bench").glob("*.py") if path.name not in LIBRARIES)


@pytest.mark.parametrize("script", SCRIPTS)
def test_the_script_starts_and_answers_help(script):
    done = subprocess.run([sys.executable, str(ROOT / "bench" / script), "--help"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage" in done.stdout.lower()
