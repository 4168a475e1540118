"""The release artefacts (issue 32): the sdist and the wheel build (the wheel from the sdist,
so the sdist is complete), and the wheel, installed into a clean virtual environment with
nothing of the checkout importable, carries the migration scripts: ``connect()``,
``opensquilla-session demo``, ``opensquilla-session db upgrade`` and ``alembic upgrade head``
with the packaged migrations all work there, next to another distribution that owns the
``opensquilla`` package itself (ours is a namespace package: it ships no
``opensquilla/__init__.py``).

The build and the environment are made once for the module (the costly part)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import tarfile
import zipfile
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest

from opensquilla.session.db import migrate

# Building the wheel and a virtualenv costs the same on any backend: once, on SQLite.
# One xdist worker runs the module (ONE_WORKER_MODULES in tests/conftest.py), so the
# module's build and environment are made once.
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
        "version": package.__version__,
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


@dataclass(frozen=True)
class Installed:
    """The built artefacts and the clean virtualenv the wheel is installed into."""

    tmp: Path
    sdist: Path
    wheel_names: list[str]
    venv: Path
    site_packages: Path

    def bin(self, name: str) -> str:
        return str(self.venv / "bin" / name)

    def env(self, **extra: str) -> dict[str, str]:
        """The environment of a command in the venv: nothing of the checkout on the path,
        no database named unless given, home and temporary files inside the test's tree."""
        drop = ("PYTHONPATH", "PYTHONHOME", "OPENSQUILLA_SESSION_DSN", "OPENSQUILLA_STATE_DIR")
        env = {k: v for k, v in os.environ.items() if k not in drop}
        env.update(extra)
        return env

    def run(self, args: list[str], **extra: str) -> str:
        return _run(args, cwd=self.tmp, env=self.env(**extra))


def _build(tmp: Path) -> tuple[Path, Path]:
    """``python -m build``: the sdist, then the wheel built from that sdist. Without build
    isolation: the backend (hatchling, the test extra) is already installed here, and a fresh
    build environment per artefact would cost most of this test's time."""
    dist = tmp / "dist"
    build = [sys.executable, "-m", "build", "-q", "--no-isolation", "--outdir", str(dist)]
    _run([*build, str(REPO_ROOT)], cwd=tmp)
    (sdist,) = dist.glob("opensquilla_session-*.tar.gz")
    (wheel,) = dist.glob("opensquilla_session-*.whl")
    return sdist, wheel


def _install(tmp: Path, *wheels: Path | str) -> Path:
    venv = tmp / "venv"
    if not venv.exists():
        # No pip inside the venv (bootstrapping it is slow): this run's pip installs into it.
        _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=tmp)
    python = venv / "bin" / "python"
    _run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", *map(str, wheels)],
        cwd=tmp,
    )
    return venv


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    tmp = tmp_path_factory.mktemp("distribution")
    sdist, wheel = _build(tmp)
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    venv = _install(tmp, wheel)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    purelib = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site_packages = Path(_run([str(venv / "bin" / "python"), "-c", purelib], cwd=tmp, env=env))
    return Installed(tmp, sdist, names, venv, Path(str(site_packages).strip()))


@pytest.mark.slow
def test_the_sdist_holds_what_a_release_needs(installed: Installed) -> None:
    with tarfile.open(installed.sdist) as archive:
        names = {Path(*Path(n).parts[1:]).as_posix() for n in archive.getnames()}
    assert {"LICENSE", "CHANGELOG.md", "README.md", "mkdocs.yml", "alembic.ini"} <= names
    assert "alembic/versions/20261129_0001_baseline.py" in names
    assert "docs/index.md" in names and "pyproject.toml" in names
    assert installed.sdist.name == f"opensquilla_session-{version('opensquilla-session')}.tar.gz"


@pytest.mark.slow
def test_the_wheel_is_a_namespace_portion_with_its_license(installed: Installed) -> None:
    names = installed.wheel_names
    assert "opensquilla/__init__.py" not in names  # the namespace stays open to others
    assert "opensquilla/session/__init__.py" in names
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names), names
    metadata = next(n for n in names if n.endswith(".dist-info/METADATA"))
    with zipfile.ZipFile(next((installed.tmp / "dist").glob("*.whl"))) as archive:
        text = archive.read(metadata).decode()
    assert "License-Expression: MIT" in text
    assert "Project-URL: Documentation, https://" in text
    assert "Description-Content-Type: text/markdown" in text
    assert "# opensquilla-session" in text  # the long description is the README


@pytest.mark.slow
async def test_wheel_upgrades_an_empty_database(installed: Installed, empty_database: str) -> None:
    """connect() in the clean venv migrates the backend's empty database to head."""
    probe = installed.tmp / "probe.py"
    probe.write_text(PROBE, encoding="utf-8")
    out = installed.run([installed.bin("python"), str(probe), empty_database])
    report: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    names, site_packages = installed.wheel_names, installed.site_packages

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
    assert report["version"] == version("opensquilla-session")

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


@pytest.mark.slow
def test_the_demo_runs_in_a_temporary_directory(installed: Installed) -> None:
    home, temporary = installed.tmp / "home", installed.tmp / "tmp"
    home.mkdir()
    temporary.mkdir()
    out = installed.run(
        [installed.bin("opensquilla-session"), "demo", "--json"],
        HOME=str(home),
        TMPDIR=str(temporary),
    )
    report = json.loads(out)
    directory = Path(report["directory"])
    assert directory.parent == temporary and (directory / "sessions.db").is_file()
    assert [step["step"] for step in report["steps"]][-1] == "reset"
    assert not any(home.iterdir())  # the embedded default database was never touched


@pytest.mark.slow
def test_db_upgrade_and_alembic_with_the_packaged_migrations(installed: Installed) -> None:
    """Where only the package is installed: ``opensquilla-session db upgrade``, and
    ``alembic upgrade head`` with an ini naming the packaged scripts (docs/deploying.md)."""
    cli = installed.bin("opensquilla-session")
    by_cli = installed.tmp / "by-cli.db"
    installed.run([cli, "--dsn", str(by_cli), "db", "upgrade"])
    installed.run([cli, "--dsn", str(by_cli), "db", "check"])  # exit 2 unless at head, no drift

    ini = installed.tmp / "alembic.ini"
    ini.write_text("[alembic]\nscript_location = opensquilla.session:_alembic\n")
    by_alembic = installed.tmp / "by-alembic.db"
    alembic = [installed.bin("alembic"), "-c", str(ini), "upgrade", "head"]
    installed.run(alembic, OPENSQUILLA_SESSION_DSN=str(by_alembic))
    installed.run([cli, "--dsn", str(by_alembic), "db", "check"])


def _other_opensquilla_wheel(directory: Path) -> Path:
    """A wheel of another distribution that owns ``opensquilla`` as a regular package (an
    ``__init__.py`` of its own) and a module beside ours, as an opensquilla runtime might."""
    files = {
        "opensquilla/__init__.py": b"RUNTIME = 'other'\n",
        "opensquilla/gateway.py": b"NAME = 'gateway'\n",
        "opensquilla_runtime-1.0.dist-info/METADATA": (
            b"Metadata-Version: 2.1\nName: opensquilla-runtime\nVersion: 1.0\n"
        ),
        "opensquilla_runtime-1.0.dist-info/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record = "opensquilla_runtime-1.0.dist-info/RECORD"
    lines = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        lines.append(f"{name},sha256={digest},{len(data)}")
    lines.append(f"{record},,")
    wheel = directory / "opensquilla_runtime-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
        archive.writestr(record, "\n".join(lines) + "\n")
    return wheel


COEXIST = r"""
import json, opensquilla, opensquilla.gateway, opensquilla.session
print(json.dumps({"runtime": opensquilla.RUNTIME, "gateway": opensquilla.gateway.NAME,
                  "session": opensquilla.session.__file__,
                  "version": opensquilla.session.__version__}))
"""


@pytest.mark.slow
def test_coexists_with_a_distribution_that_owns_opensquilla(installed: Installed) -> None:
    """Installed into the same environment (one site-packages), the other distribution's
    ``opensquilla/__init__.py`` and our ``opensquilla/session/`` share the directory: both
    import, and removing the other leaves ours whole. On a *separate* path entry ahead of
    ours, a regular ``opensquilla`` package hides ``opensquilla.session`` (Python stops at the
    first regular package): that is the one arrangement that does not work."""
    other = _other_opensquilla_wheel(installed.tmp)
    python = installed.bin("python")
    _install(installed.tmp, other, "--no-deps")
    try:
        both = json.loads(installed.run([python, "-c", COEXIST]))
        assert both["runtime"] == "other" and both["gateway"] == "gateway"
        assert Path(both["session"]).is_relative_to(installed.site_packages)
    finally:
        _run(
            [
                sys.executable,
                "-m",
                "pip",
                "--python",
                python,
                "uninstall",
                "-q",
                "-y",
                "opensquilla-runtime",
            ],
            cwd=installed.tmp,
        )
    alone = "import opensquilla.session as s; print(s.__version__)"
    assert installed.run([python, "-c", alone]).strip() == version("opensquilla-session")

    shadow = installed.tmp / "shadow"
    (shadow / "opensquilla").mkdir(parents=True)
    (shadow / "opensquilla" / "__init__.py").write_text("")
    hidden = subprocess.run(
        [python, "-c", "import opensquilla.session"],
        env=installed.env(PYTHONPATH=str(shadow)),
        capture_output=True,
        text=True,
        check=False,
    )
    assert hidden.returncode == 1 and "No module named 'opensquilla.session'" in hidden.stderr
