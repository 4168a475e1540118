"""Every benchmark script under ``bench/`` still starts (``--help``): a script whose imports
or module-level names a refactor broke fails here, not on the next person who measures
(``bench/append_rounds.py`` read ``uow.statements_watched`` after it moved)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

# A whole-process check of files, no database: run once.
pytestmark = pytest.mark.once(backend="sqlite")

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = sorted(
    path
    for path in (ROOT / "bench").glob("*.py")
    if 'if __name__ == "__main__"' in path.read_text(encoding="utf-8")
)
TIMEOUT = 120.0  # a hang guard: importing the frameworks takes seconds


def test_the_scripts_are_found() -> None:
    assert {"run.py", "append_rounds.py", "primitives_writes.py"} <= {p.name for p in SCRIPTS}


@pytest.mark.parametrize("script", SCRIPTS, ids=[p.name for p in SCRIPTS])
def test_a_benchmark_script_starts(script: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(script), "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage:" in done.stdout
