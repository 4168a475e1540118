"""The PostgreSQL migration lock: a worker waiting for it holds no snapshot.

A revision builds indexes ``CREATE INDEX CONCURRENTLY``, which waits for every transaction
with an older snapshot to end. A worker that waited for the migration lock inside the
server (``pg_advisory_lock``) would hold one for the whole wait: the migrating worker's
index build would wait for it while it waits for the lock. So a waiting worker tries the
lock and sleeps between tries with no transaction open (db/migrate.py).
"""

from __future__ import annotations

import asyncio

import pytest
import sqlalchemy as sa

from opensquilla.session.db import migrate
from opensquilla.session.storage import SessionStorage
from tests.conftest import Backend


@pytest.fixture
def postgres_only(backend: Backend) -> None:
    if not backend.is_postgres:
        pytest.skip("the lock this tests is PostgreSQL's; SQLite's is its write lock")


async def test_a_worker_waiting_for_the_migration_lock_holds_no_snapshot(
    postgres_only: None, database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    tried = asyncio.Event()
    real_sleep = asyncio.sleep

    async def observed_sleep(seconds: float) -> None:
        if seconds == migrate.LOCK_POLL_SECONDS:
            tried.set()
        await real_sleep(seconds)

    monkeypatch.setattr(migrate.asyncio, "sleep", observed_sleep)
    async with SessionStorage(database) as holder, SessionStorage(database) as waiter:
        async with holder.engine.connect() as lock_conn:
            await lock_conn.execute(sa.select(sa.func.pg_advisory_lock(migrate.MIGRATION_LOCK_KEY)))
            await lock_conn.commit()
            holder_pid = await lock_conn.scalar(sa.select(sa.func.pg_backend_pid()))

            waiting = asyncio.create_task(migrate.upgrade(waiter.engine, "head"))
            await asyncio.wait_for(tried.wait(), timeout=30)
            assert not waiting.done()

            # Nobody but the lock holder's idle session is connected with a snapshot or a
            # lock wait: the waiter is between tries, outside any transaction.
            rows = (
                await lock_conn.execute(
                    sa.text(
                        "SELECT pid, state, backend_xmin, wait_event_type FROM pg_stat_activity "
                        "WHERE datname = current_database() AND pid <> :me"
                    ),
                    {"me": holder_pid},
                )
            ).all()
            await lock_conn.commit()
            assert all(row.backend_xmin is None for row in rows), rows
            assert all(row.wait_event_type != "Lock" for row in rows), rows

            await lock_conn.execute(
                sa.select(sa.func.pg_advisory_unlock(migrate.MIGRATION_LOCK_KEY))
            )
            await lock_conn.commit()
        await asyncio.wait_for(waiting, timeout=60)
        assert await migrate.current_revisions(waiter.engine) == tuple(migrate.head_revisions())
