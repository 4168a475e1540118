"""A storage on a database that refuses writes, as a hot standby does (docs/scaling.md#read-
replicas-for-listing-and-search): it connects and serves listings, search, stats and
transcript reads; a write fails with ``DatabaseError`` naming the refusal, and changes nothing.

The standby is stood in for by ``default_transaction_read_only`` set on the test's database
(every new connection's transactions are read only, as on a standby); it is reset before the
database goes back to the pool."""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest
from sqlalchemy.engine import make_url

from opensquilla.session import SessionManager, SessionStorage
from opensquilla.session.errors import DatabaseError

KEY = "agent:main:replica"

pytestmark = pytest.mark.postgres_only


def _plain_dsn(target: str) -> tuple[str, str]:
    url = make_url(target).set(drivername="postgresql")
    url = url.difference_update_query(["schema"])
    assert url.database
    return url.render_as_string(hide_password=False), url.database


@pytest.fixture
async def read_only(database: str) -> AsyncIterator[str]:
    """``database`` with a session and two messages written, then set read only."""
    async with SessionStorage(database) as storage:
        manager = SessionManager(storage, inject_time_prefix=False)
        await manager.create(KEY, display_name="replica probe")
        await manager.append_message(KEY, "user", "hello from the primary")
        await manager.append_message(KEY, "assistant", "replicas serve the reads")
    dsn, name = _plain_dsn(database)
    admin = await asyncpg.connect(dsn)
    try:
        await admin.execute(f'ALTER DATABASE "{name}" SET default_transaction_read_only = on')
        yield database
    finally:
        await admin.execute(f'ALTER DATABASE "{name}" RESET default_transaction_read_only')
        await admin.close()


async def test_reads_are_served_and_a_write_is_refused_whole(read_only: str) -> None:
    async with SessionStorage(read_only) as storage:
        manager = SessionManager(storage, inject_time_prefix=False)
        assert [s.session_key for s in await manager.list_sessions()] == [KEY]
        page = await manager.list_sessions_page()
        assert [s.session_key for s in page.sessions] == [KEY]
        found = await manager.search("replicas")
        assert [(hit.session_key, hit.role) for hit in found.messages] == [(KEY, "assistant")]
        assert [s.session_key for s in await manager.search_sessions_by_title("probe")] == [KEY]
        assert (await manager.stats()).counts.live_entries == 2
        before = [e.content for e in await manager.get_transcript(KEY)]
        assert before == ["hello from the primary", "replicas serve the reads"]

        with pytest.raises(DatabaseError, match="read-only transaction"):
            await manager.append_message(KEY, "user", "written on a standby")
        with pytest.raises(DatabaseError, match="read-only transaction"):
            await manager.create("agent:main:another")

        assert [e.content for e in await manager.get_transcript(KEY)] == before
        assert await manager.get_session("agent:main:another") is None
