"""Reading a database without our code: what "left exactly as it was" is compared on.

Everything here goes through the raw driver (stdlib ``sqlite3`` or ``asyncpg``), never
through ``SessionStorage``, which would migrate the database first."""

from __future__ import annotations

import contextlib
import sqlite3
from typing import Any

import asyncpg

from .test_legacy_adoption import _Backend, _pg_dsn, fetch, run_sql

__all__ = ["fetch", "raw_state", "run_sql", "version_rows"]


def _sqlite_state(target: str) -> dict[str, Any]:
    with contextlib.closing(sqlite3.connect(target)) as db:
        objects = [
            tuple(row)
            for row in db.execute(
                "SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name"
            )
        ]
        rows = {}
        for kind, name, _table, _sql in objects:
            if kind == "table" and not name.startswith("sqlite_"):
                rows[name] = [tuple(r) for r in db.execute(f'SELECT * FROM "{name}" ORDER BY 1')]
        sequence: list[tuple[Any, ...]] = []
        if any(name == "sqlite_sequence" for _kind, name, _t, _s in objects):
            sequence = [tuple(r) for r in db.execute("SELECT * FROM sqlite_sequence ORDER BY 1")]
    return {"objects": objects, "rows": rows, "sqlite_sequence": sequence}


async def _postgres_state(target: str) -> dict[str, Any]:
    conn = await asyncpg.connect(_pg_dsn(target))
    try:
        columns = [
            tuple(r)
            for r in await conn.fetch(
                "SELECT table_name, column_name, data_type, is_nullable, column_default "
                "FROM information_schema.columns WHERE table_schema = 'public' "
                "ORDER BY table_name, ordinal_position"
            )
        ]
        indexes = [
            tuple(r)
            for r in await conn.fetch(
                "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'public' "
                "ORDER BY indexname"
            )
        ]
        triggers = [
            tuple(r)
            for r in await conn.fetch(
                "SELECT tgname, pg_get_triggerdef(oid) FROM pg_trigger "
                "WHERE NOT tgisinternal ORDER BY tgname"
            )
        ]
        functions = [
            r[0]
            for r in await conn.fetch(
                "SELECT proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
                "WHERE n.nspname = 'public' ORDER BY proname"
            )
        ]
        tables = sorted({table for table, *_ in columns})
        rows = {
            table: [tuple(r) for r in await conn.fetch(f'SELECT * FROM "{table}" ORDER BY 1')]
            for table in tables
        }
    finally:
        await conn.close()
    return {
        "columns": columns,
        "indexes": indexes,
        "triggers": triggers,
        "functions": functions,
        "rows": rows,
    }


async def raw_state(backend: _Backend, target: str) -> dict[str, Any]:
    """Every table, column, index, trigger (and on Postgres function) and every row."""
    if backend.is_postgres:
        return await _postgres_state(target)
    return _sqlite_state(target)


async def version_rows(backend: _Backend, target: str) -> list[str] | None:
    """The ``opensquilla_session_version`` rows, or ``None`` when the table does not exist."""
    if backend.is_postgres:
        present = await fetch(
            backend, target, "SELECT to_regclass('public.opensquilla_session_version')"
        )
        if present[0][0] is None:
            return None
    else:
        present = await fetch(
            backend,
            target,
            "SELECT name FROM sqlite_master "
            "WHERE type = 'table' AND name = 'opensquilla_session_version'",
        )
        if not present:
            return None
    return sorted(
        r[0]
        for r in await fetch(backend, target, "SELECT version_num FROM opensquilla_session_version")
    )
