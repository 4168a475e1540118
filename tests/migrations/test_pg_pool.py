"""The test suite's PostgreSQL pools (tests/pg_pool.py) hand a database out again only when it
is as clean as the template: the catalog signature that spares the schema fingerprint must
never let a changed schema through."""

from __future__ import annotations

import asyncpg
import pytest

from tests.conftest import Backend

pytestmark = pytest.mark.postgres_only


async def _cycle(backend: Backend, name: str, statement: str | None) -> None:
    databases = backend.databases
    assert databases is not None
    if statement is not None:
        conn = await asyncpg.connect(databases.dsn(name))
        try:
            await conn.execute(statement)
        finally:
            await conn.close()
    await databases.give_back(name)


async def test_a_clean_database_comes_back_signed_and_a_changed_one_never(
    backend: Backend,
) -> None:
    databases = backend.databases
    assert databases is not None
    name = await databases.take(migrated=True)
    await _cycle(backend, name, None)  # fingerprinted: its signature is kept
    assert name in databases.migrated and name in databases.signatures
    databases.migrated.remove(name)
    signed = databases.stats["signed"]
    await _cycle(
        backend,
        name,
        "INSERT INTO sessions (session_key, session_id, created_at, "
        "updated_at) VALUES ('k', 'i', 1, 1)",
    )  # rows only: signed, emptied
    assert databases.stats["signed"] == signed + 1
    assert name in databases.migrated
    databases.migrated.remove(name)
    # A schema change the signature must see: it goes to the fingerprint, which refuses it.
    await _cycle(backend, name, "CREATE INDEX test_pool_probe ON sessions (model)")
    assert name not in databases.migrated
    assert databases.stats["signed"] == signed + 1
    if name in databases.empty:  # scrubbed to an empty database: it must really be empty
        conn = await asyncpg.connect(databases.dsn(name))
        try:
            assert await conn.fetchval("SELECT to_regclass('sessions')") is None
        finally:
            await conn.close()
