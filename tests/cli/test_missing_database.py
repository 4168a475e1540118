"""Commands that only read never create a database: on a missing SQLite file (or a
PostgreSQL database the server lacks) they say so, exit 1 and leave the disk as it was.
Commands that write still create a missing SQLite file."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from tests.conftest import Backend

from .support import cli

READING = [
    ("stats",),
    ("sessions", "list"),
    ("sessions", "show", "agent:main:main"),
    ("search", "hello"),
    ("export",),
    ("db", "current"),
    ("db", "check"),
    ("db", "downgrade", "base"),  # nothing to downgrade: no file is made for it
    ("repair", "list"),
    ("repair", "show", "1"),
    ("reset", "agent:main:main", "--dry-run"),
    ("truncate", "agent:main:main", "0", "--dry-run"),
    ("prune", "--older-than", "1d", "--dry-run"),
    ("cap", "--max", "0", "--dry-run"),
]


def _tree(root: Path) -> list[str]:
    return sorted(str(path.relative_to(root)) for path in root.rglob("*"))


def _missing(backend: Backend, tmp_path: Path) -> tuple[str, str]:
    """A database that does not exist, and the part of its name an error must show."""
    if backend.is_postgres:
        name = "osq_missing_" + uuid.uuid4().hex[:16]
        return backend.target_for(name), name
    path = tmp_path / "nonexist" / "dir" / "x.db"
    return str(path), str(path)


@pytest.mark.parametrize("command", READING, ids=" ".join)
def test_a_reading_command_on_a_missing_database_creates_nothing(
    backend: Backend, tmp_path: Path, command: tuple[str, ...]
) -> None:
    target, named = _missing(backend, tmp_path)
    before = _tree(tmp_path)
    result = cli(target, *command)
    assert result.exit_code == 1, result.output
    assert named in result.stderr and "nothing was created" in result.stderr
    assert result.stderr.count("\n") == 1  # one line, no traceback
    assert _tree(tmp_path) == before


def test_export_to_a_file_from_a_missing_database_writes_no_file(
    backend: Backend, tmp_path: Path
) -> None:
    target, _ = _missing(backend, tmp_path)
    before = _tree(tmp_path)
    result = cli(target, "export", "--output", str(tmp_path / "out.jsonl"))
    assert result.exit_code == 1 and "nothing was created" in result.stderr
    assert _tree(tmp_path) == before


def test_copy_from_a_missing_database_creates_neither_side(
    backend: Backend, tmp_path: Path
) -> None:
    source, named = _missing(backend, tmp_path)
    before = _tree(tmp_path)
    result = cli(None, "copy", "--from", source, "--to", str(tmp_path / "target.db"))
    assert result.exit_code == 1 and named in result.stderr
    assert _tree(tmp_path) == before


def test_a_writing_command_still_creates_a_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "new" / "sessions.db"
    upgraded = cli(str(path), "db", "upgrade")
    assert upgraded.exit_code == 0, upgraded.output
    assert path.is_file()
    listed = cli(str(path), "sessions", "list", "--json")
    assert listed.exit_code == 0 and json.loads(listed.stdout)["sessions"] == []
