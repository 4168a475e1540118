"""Adopting the real files the older store wrote (``fixtures/legacy``), proven against
their manifests, which were computed with stdlib ``sqlite3`` and not with our code.

These are SQLite files by nature, so the module runs the same in either backend's session.
The originals are never opened: every test works on a copy."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from opensquilla.session import SessionManager, SessionStorage
from opensquilla.session.db import migrate

try:  # the helper module is importable as ``tests.helpers`` once ``tests`` is a package
    from tests.helpers import table_snapshot
except ModuleNotFoundError:  # pragma: no cover - rootdir-relative import (no tests/__init__)
    from helpers import table_snapshot  # type: ignore[no-redef]

LEGACY_DIR = Path(
    os.environ.get(
        "OPENSQUILLA_LEGACY_FIXTURES",
        str(Path(__file__).resolve().parents[3] / "shared" / "fixtures" / "legacy"),
    )
)
FIXTURES = ("sessions-2026-07.sqlite", "sessions-2026-08.sqlite")
LEGACY_TRIGGERS = {
    "transcript_fts_ai",
    "transcript_fts_ad",
    "transcript_fts_au",
    "prevent_epoch_rollback",
}

# Outside CI a checkout without ../shared skips these; in CI a missing file is a failure.
pytestmark = pytest.mark.skipif(
    not os.environ.get("CI") and not all((LEGACY_DIR / name).is_file() for name in FIXTURES),
    reason=f"legacy fixtures not present in {LEGACY_DIR}",
)


@dataclass
class Fixture:
    path: Path
    manifest: dict[str, Any]


@contextlib.contextmanager
def _sqlite(path: Path) -> Iterator[sqlite3.Connection]:
    db = sqlite3.connect(path)
    try:
        yield db
    finally:
        db.close()


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _json_value(value: Any) -> Any:
    return value.hex() if isinstance(value, bytes) else value


def rows_sha256(db: sqlite3.Connection, table: str, columns: list[str], key: list[str]) -> str:
    """The manifest's ``row_hash_method``: one sorted-keys ASCII JSON line per row, in
    primary-key order, over exactly the listed columns."""
    selected = ", ".join(f'"{c}"' for c in columns)
    order = ", ".join(f'"{c}" COLLATE BINARY' for c in key)
    digest = hashlib.sha256()
    for row in db.execute(f'SELECT {selected} FROM "{table}" ORDER BY {order}'):
        mapped = {c: _json_value(v) for c, v in zip(columns, row, strict=True)}
        line = json.dumps(mapped, sort_keys=True, ensure_ascii=True, separators=(",", ":"))
        digest.update((line + "\n").encode("utf-8"))
    return digest.hexdigest()


def _count(db: sqlite3.Connection, table: str) -> int:
    return int(db.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0])


def _triggers(db: sqlite3.Connection) -> dict[str, str]:
    return dict(db.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger'"))


def _sequence(db: sqlite3.Connection) -> dict[str, int]:
    return dict(db.execute("SELECT name, seq FROM sqlite_sequence"))


def _schema_sql(db: sqlite3.Connection) -> list[tuple[str, str, str | None]]:
    return list(db.execute("SELECT type, name, sql FROM sqlite_master ORDER BY type, name"))


@pytest.fixture(params=FIXTURES)
def legacy(request: pytest.FixtureRequest, tmp_path: Path) -> Fixture:
    """A private copy of one legacy file, checked to be byte-identical to what the
    manifest describes (so a passing test really adopted the real file)."""
    name: str = request.param
    manifest = json.loads((LEGACY_DIR / f"{name}.manifest.json").read_text(encoding="utf-8"))
    copy = tmp_path / name
    shutil.copyfile(LEGACY_DIR / name, copy)
    os.chmod(copy, 0o600)
    assert _sha256_file(copy) == manifest["db_sha256"]
    return Fixture(copy, manifest)


def test_row_hash_reproduces_the_manifest_before_adoption(legacy: Fixture) -> None:
    """Our reading of ``row_hash_method`` matches the manifest on the untouched copy; the
    comparisons after adoption therefore mean something."""
    with _sqlite(legacy.path) as db:
        for table, spec in legacy.manifest["tables"].items():
            got = rows_sha256(db, table, spec["columns"], spec["primary_key"])
            assert got == spec["rows_sha256"], table
            assert _count(db, table) == spec["row_count"], table


def _fts_settings(db: sqlite3.Connection) -> dict[str, object]:
    """The FTS5 settings of ``transcript_fts`` besides the format ``version`` row."""
    return dict(db.execute("SELECT k, v FROM transcript_fts_config WHERE k <> 'version'"))


async def test_adoption_keeps_every_row_trigger_and_counter(legacy: Fixture) -> None:
    """``connect()`` brings the file to head in place: every listed column of every row is
    unchanged, the other tables too, the older store's triggers survive and the id
    counters in ``sqlite_sequence`` are not reset."""
    manifest = legacy.manifest
    with _sqlite(legacy.path) as db:
        triggers_before = _triggers(db)
        sequence_before = _sequence(db)
    assert set(triggers_before) >= LEGACY_TRIGGERS

    async with SessionStorage(legacy.path) as storage:
        assert await migrate.current_revisions(storage.engine) == migrate.head_revisions()
        assert (await migrate.check(storage.engine)).drift == ()

    with _sqlite(legacy.path) as db:
        for table, spec in manifest["tables"].items():
            present = [row[1] for row in db.execute(f'PRAGMA table_info("{table}")')]
            assert set(spec["columns"]) <= set(present), table
            # Adoption adds columns at the end; it never reorders or rebuilds the table.
            assert present[: len(spec["columns"])] == spec["columns"], table
            assert _count(db, table) == spec["row_count"], table
            got = rows_sha256(db, table, spec["columns"], spec["primary_key"])
            assert got == spec["rows_sha256"], table
        for table, count in manifest["other_table_row_counts"].items():
            if table == "transcript_fts_config":
                # Revision 0004 adds its one setting to the older store's own rows.
                assert _fts_settings(db) == {"hashsize": 65536}, table
                count += 1
            assert _count(db, table) == count, table
        triggers_after = _triggers(db)
        assert {name: triggers_after.get(name) for name in LEGACY_TRIGGERS} == {
            name: triggers_before[name] for name in LEGACY_TRIGGERS
        }
        assert _sequence(db) == sequence_before


async def test_spot_checks_hold_through_the_public_api(legacy: Fixture) -> None:
    """What a caller sees after adoption is what the older store wrote."""
    async with SessionStorage(legacy.path) as storage:
        manager = SessionManager(storage, inject_time_prefix=False)
        for check in legacy.manifest["spot_checks"]:
            key = check["session_key"]
            node = await manager.get_session(key)
            assert node is not None, key
            assert node.session_id == check["session_id"], key
            assert node.epoch == check["epoch"], key
            assert node.compaction_count == check["compaction_count"], key
            assert node.total_tokens == check["total_tokens"], key

            live = await manager.get_transcript(key)
            assert len(live) == check["live_entries"], key
            archived = await storage.get_compacted_transcript_entries(node.session_id)
            assert len(archived) == check["archived_entries"], key
            assert len(await manager.get_summaries(key)) == check["summaries"], key

            for entry, expected in ((live[0], check["first_live"]), (live[-1], check["last_live"])):
                assert entry.message_id == expected["message_id"], key
                digest = (
                    None
                    if entry.content is None
                    else hashlib.sha256(entry.content.encode("utf-8")).hexdigest()
                )
                assert digest == expected["content_sha256"], key


async def test_second_connect_changes_nothing(legacy: Fixture) -> None:
    """Adoption happens once: a later ``connect()`` leaves rows, schema and version alone."""
    async with SessionStorage(legacy.path) as first:
        snapshot = await table_snapshot(first)
        async with first.engine.connect() as conn:
            version = (
                await conn.execute(sa.text("SELECT version_num FROM opensquilla_session_version"))
            ).all()
    with _sqlite(legacy.path) as db:
        schema = _schema_sql(db)
        sequence = _sequence(db)

    async with SessionStorage(legacy.path) as second:
        assert await migrate.ensure_head(second.engine) is False
        assert await table_snapshot(second) == snapshot
        async with second.engine.connect() as conn:
            again = (
                await conn.execute(sa.text("SELECT version_num FROM opensquilla_session_version"))
            ).all()
        assert again == version
    with _sqlite(legacy.path) as db:
        assert _schema_sql(db) == schema
        assert _sequence(db) == sequence


async def test_new_rows_continue_the_old_ids_and_feed_the_fts_index(legacy: Fixture) -> None:
    """A message appended after adoption gets an id above every id the older store ever
    handed out, and the older store's FTS triggers still index it."""
    with _sqlite(legacy.path) as db:
        old_sequence = _sequence(db)["transcript_entries"]
        fts_before = _count(db, "transcript_fts")
    key = legacy.manifest["spot_checks"][0]["session_key"]
    marker = "zanzibarquokka"

    async with SessionStorage(legacy.path) as storage:
        manager = SessionManager(storage, inject_time_prefix=False)
        entry = await manager.append_message(key, "user", f"after adoption {marker}")
        assert entry.id is not None and entry.id > old_sequence
        live = await manager.get_transcript(key)
        assert live[-1].id == entry.id

    with _sqlite(legacy.path) as db:
        assert _count(db, "transcript_fts") == fts_before + 1
        hits = [
            row[0]
            for row in db.execute(
                "SELECT rowid FROM transcript_fts WHERE transcript_fts MATCH ?", (marker,)
            )
        ]
        assert hits == [entry.id]
        assert _sequence(db)["transcript_entries"] == entry.id


async def test_existing_rows_are_searchable_after_adoption(legacy: Fixture) -> None:
    """Rows the older store wrote are found by word and by substring once adopted."""
    check = legacy.manifest["spot_checks"][0]
    with _sqlite(legacy.path) as db:
        row_id, content = db.execute(
            "SELECT id, content FROM transcript_entries WHERE session_id = ? "
            "AND content IS NOT NULL ORDER BY id LIMIT 1",
            (check["session_id"],),
        ).fetchone()
    word = max(re.findall(r"[A-Za-z0-9]+", content), key=len)

    async with SessionStorage(legacy.path) as storage:
        assert await migrate.current_revisions(storage.engine) == migrate.head_revisions()
        words = await storage.search_transcript(
            word, check["session_id"], limit=10_000, rank_window=None
        )
        assert row_id in [hit["id"] for hit in words]
        like = await storage.search_transcript_like(word, check["session_id"], limit=10_000)
        assert row_id in [hit["id"] for hit in like]
