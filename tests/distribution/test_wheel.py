"""The built wheel carries the migration scripts: a plain ``pip install`` (no checkout)
upgrades a fresh database of the configured backend to head on ``connect()``."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from opensquilla.session.db import migrate

# Building the wheel and a virtualenv costs the same on any backend: once, on SQLite.
pytestmark = pytest.mark.once(backend="sqlite")

REPO_ROOT = Path(__file__).resolve().parents[2]

# Runs inside the fresh virtualenv: nothing from the checkout is importable there.
PROBE = r"""
import asyncio, json, sys
import sqlalchemy as sa
import opensquilla.session as package
from opensquilla.session import SessionStorage
from opensquilla.session.db import migrate

async def main(target):
    async with SessionStorage(target) as storage:
        async with storage.engine.connect() as conn:
            tables = await conn.run_sync(lambda c: sa.inspect(c).get_table_names())
            rows = await conn.execute(
                sa.text("SELECT version_num FROM opensquilla_session_version")
            )
            versions = [row[0] for row in rows]
        status = await migrate.check(storage.engine)
    print(json.dumps({
        "package_file": package.__file__,
        "scripts": str(migrate.script_location()),
        "heads": list(migrate.head_revisions()),
        "tables": sorted(tables),
        "versions": versions,
        "drift": list(status.drift),
    }))

asyncio.run(main(sys.argv[1]))
"""


def _run(args: list[str], *, cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        args, cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, f"{args[:4]} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def _build_and_probe(tmp: Path, target: str) -> tuple[list[str], dict[str, Any], Path]:
    wheels = tmp / "wheels"
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "-q",
            "-w",
            str(wheels),
            str(REPO_ROOT),
        ],
        cwd=tmp,
    )
    (wheel,) = wheels.glob("opensquilla_session-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()

    venv = tmp / "venv"
    # No pip inside the venv (bootstrapping it is slow): this run's pip installs into it.
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=tmp)
    python = venv / "bin" / "python"
    _run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", str(wheel)], cwd=tmp
    )

    probe = tmp / "probe.py"
    probe.write_text(PROBE, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    out = _run([str(python), str(probe), target], cwd=tmp, env=env)
    site_packages = Path(
        _run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            cwd=tmp,
            env=env,
        ).strip()
    )
    return names, json.loads(out.strip().splitlines()[-1]), site_packages


@pytest.mark.slow
async def test_wheel_upgrades_an_empty_database(empty_database: str, tmp_path: Path) -> None:
    """Build, install into a clean venv, connect to the backend's empty database."""
    names, report, site_packages = await asyncio.to_thread(
        _build_and_probe, tmp_path, empty_database
    )

    assert "opensquilla/session/_alembic/env.py" in names
    revisions = [n for n in names if n.startswith("opensquilla/session/_alembic/versions/")]
    shipped = {Path(n).name for n in revisions if n.endswith(".py")}
    in_checkout = {p.name for p in (REPO_ROOT / "alembic" / "versions").glob("*.py")}
    assert shipped == in_checkout
    assert "20261129_0001_baseline.py" in shipped

    package_file = Path(str(report["package_file"]))
    assert package_file.is_relative_to(site_packages), package_file
    assert not package_file.is_relative_to(REPO_ROOT / "src")
    assert Path(str(report["scripts"])) == site_packages / "opensquilla" / "session" / "_alembic"

    heads = list(migrate.head_revisions())
    assert report["heads"] == heads
    assert report["versions"] == heads
    tables = set(report["tables"])
    assert tables >= {
        "sessions",
        "transcript_entries",
        "compacted_transcript_entries",
        "session_summaries",
        "session_context_states",
        "opensquilla_session_version",
    }
    assert report["drift"] == []
