"""Export never destroys what it writes to.

``export -o <the live .db>`` used to rename the JSONL over the database, and a FIFO or a
symlink to a device was replaced by a regular file. The store's own files (however they
are reached) and other databases are refused; FIFOs, devices and descriptors are written
straight through; a regular file still gets an atomic temporary-and-rename.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from opensquilla.session import SessionStorage

from ..cli.support import cli, dump_tables, run, seed_rich


def _export_lines(data: bytes) -> list[dict]:
    return [json.loads(line) for line in data.splitlines()]


def _complete_export(data: bytes, sessions: int) -> None:
    records = _export_lines(data)
    assert records[0]["kind"] == "header" and records[-1]["kind"] == "footer"
    assert records[-1]["sessions"] == sessions


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Path:
    """A live SQLite store with sessions (the store whose own files are at stake; the same
    on both test backends, since only a SQLite store has files)."""
    path = tmp_path / "live" / "sessions.db"
    run(seed_rich(str(path), big=False))
    return path


def _refused(dsn: str, destination: Path | str) -> str:
    result = cli(dsn, "export", "-o", str(destination))
    assert result.exit_code == 1, result.output
    assert result.stderr.startswith("error: refusing to export to ")
    assert len(result.stderr.splitlines()) == 1 and "Traceback" not in result.output
    return result.stderr


def test_the_live_database_and_its_companions_are_refused(sqlite_store: Path) -> None:
    dsn = str(sqlite_store)
    before = run(dump_tables(dsn))
    raw = sqlite_store.read_bytes()
    for suffix in ("", "-wal", "-shm", "-journal"):
        message = _refused(dsn, f"{sqlite_store}{suffix}")
        assert "own database file" in message
    assert sqlite_store.read_bytes() == raw
    assert run(dump_tables(dsn)) == before


def test_the_live_database_is_refused_through_links(sqlite_store: Path, tmp_path: Path) -> None:
    dsn = str(sqlite_store)
    before = run(dump_tables(dsn))
    symlink = tmp_path / "innocent.jsonl"
    symlink.symlink_to(sqlite_store)
    hardlink = tmp_path / "also-innocent.jsonl"
    os.link(sqlite_store, hardlink)
    chained = tmp_path / "chain.jsonl"
    chained.symlink_to(symlink)
    for destination in (symlink, hardlink, chained):
        _refused(dsn, destination)
    assert symlink.is_symlink() and chained.is_symlink()
    assert os.stat(hardlink).st_ino == os.stat(sqlite_store).st_ino
    assert run(dump_tables(dsn)) == before


def test_the_live_database_is_refused_through_the_api(sqlite_store: Path, tmp_path: Path) -> None:
    from opensquilla.session import transfer
    from opensquilla.session.errors import InvalidInputError

    async def attempt() -> None:
        async with SessionStorage(sqlite_store) as storage:
            with pytest.raises(InvalidInputError, match="own database file"):
                await transfer.export_to_file(storage, sqlite_store)

    run(attempt())
    assert run(dump_tables(str(sqlite_store)))["sessions"]


def test_another_database_is_refused(database: str, tmp_path: Path) -> None:
    """Any SQLite database is refused as a destination, not only the store's own."""
    run(seed_rich(database, big=False))
    other = tmp_path / "other.db"
    run(seed_rich(str(other), big=False))
    before = run(dump_tables(str(other)))
    message = _refused(database, other)
    assert "SQLite database" in message
    assert run(dump_tables(str(other))) == before


def test_a_directory_is_refused_in_one_line(database: str, tmp_path: Path) -> None:
    run(seed_rich(database, big=False))
    result = cli(database, "export", "-o", str(tmp_path))
    assert result.exit_code == 1
    assert "is a directory" in result.stderr and len(result.stderr.splitlines()) == 1
    assert tmp_path.is_dir()


def test_a_fifo_is_written_through_and_stays_a_fifo(database: str, tmp_path: Path) -> None:
    seeded = run(seed_rich(database, big=False))
    (tmp_path / "out").mkdir()
    fifo = tmp_path / "out" / "pipe"
    os.mkfifo(fifo)
    received: list[bytes] = []

    def reader() -> None:
        with open(fifo, "rb") as stream:
            received.append(stream.read())

    thread = threading.Thread(target=reader)
    thread.start()
    result = cli(database, "export", "-o", str(fifo))
    thread.join(timeout=300)
    assert result.exit_code == 0, result.output
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    _complete_export(received[0], len(seeded.keys))
    assert [p.name for p in fifo.parent.iterdir()] == ["pipe"]  # no temporary file left


def test_a_symlink_to_dev_null_stays_a_symlink(database: str, tmp_path: Path) -> None:
    """Through a symlink in the test's own directory: code that got this wrong replaces
    the symlink, never the machine's /dev/null."""
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode), "/dev/null is broken on this machine"
    run(seed_rich(database, big=False))
    link = tmp_path / "discard.jsonl"
    link.symlink_to("/dev/null")
    result = cli(database, "export", "-o", str(link))
    assert result.exit_code == 0, result.output
    assert link.is_symlink() and os.readlink(link) == "/dev/null"
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_a_symlink_to_a_fifo_is_written_through(database: str, tmp_path: Path) -> None:
    seeded = run(seed_rich(database, big=False))
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    link = tmp_path / "export.jsonl"
    link.symlink_to(fifo)
    received: list[bytes] = []
    thread = threading.Thread(target=lambda: received.append(fifo.read_bytes()))
    thread.start()
    result = cli(database, "export", "-o", str(link))
    thread.join(timeout=300)
    assert result.exit_code == 0, result.output
    assert link.is_symlink() and stat.S_ISFIFO(os.lstat(fifo).st_mode)
    _complete_export(received[0], len(seeded.keys))


def test_dash_means_stdout(database: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seeded = run(seed_rich(database, big=False))
    monkeypatch.chdir(tmp_path)
    result = cli(database, "export", "-o", "-")
    assert result.exit_code == 0, result.output
    _complete_export(result.stdout_bytes, len(seeded.keys))
    assert not (tmp_path / "-").exists()


@pytest.mark.parametrize("alias", ["/dev/fd/1", "/proc/self/fd/1"])
def test_a_descriptor_path_keeps_the_redirect(database: str, tmp_path: Path, alias: str) -> None:
    """``-o /dev/stdout`` (here its spellings ``/dev/fd/1`` and ``/proc/self/fd/1``, which
    code that got this wrong cannot replace: nothing can be created in /proc) writes
    through the process's own descriptor: a ``>>`` redirect keeps what was in the file and
    appends; the file is neither truncated nor replaced."""
    seeded = run(seed_rich(database, big=False))
    target = tmp_path / "log.txt"
    target.write_bytes(b"kept line\n")
    inode = os.stat(target).st_ino
    command = [sys.executable, "-m", "opensquilla.session", "--dsn", database]
    with open(target, "ab") as stdout:
        result = subprocess.run(
            [*command, "export", "-o", alias],
            stdout=stdout,
            stderr=subprocess.PIPE,
            timeout=300,  # a hang guard only
            check=False,
        )
    assert result.returncode == 0, result.stderr
    data = target.read_bytes()
    assert data.startswith(b"kept line\n")
    _complete_export(data[len(b"kept line\n") :], len(seeded.keys))
    assert os.stat(target).st_ino == inode


def test_a_regular_file_through_a_symlink_is_replaced_atomically(
    database: str, tmp_path: Path
) -> None:
    """The symlink stays; the file it points to gets the export, owner-only, whole."""
    seeded = run(seed_rich(database, big=False))
    real = tmp_path / "exports" / "sessions.jsonl"
    real.parent.mkdir()
    real.write_text("an older export\n")
    link = tmp_path / "latest.jsonl"
    link.symlink_to(real)
    result = cli(database, "export", "-o", str(link))
    assert result.exit_code == 0, result.output
    assert link.is_symlink() and link.resolve() == real
    _complete_export(real.read_bytes(), len(seeded.keys))
    assert stat.S_IMODE(os.stat(real).st_mode) == 0o600
    assert sorted(p.name for p in real.parent.iterdir()) == ["sessions.jsonl"]
