"""The listing's ``key_prefix`` (issue 28, item 6; docs/semantics.md#listing): the sessions
whose canonical key starts with the prefix, byte-exact (``%``, ``_`` and backslash are
literal, no case folding), on both listing forms and their keyset pages, served by the
key's index on both backends."""

from __future__ import annotations

import random
import re
from typing import Any

import pytest
import sqlalchemy as sa

from opensquilla.session import SessionManager, SessionStorage
from opensquilla.session.db.repos import sessions as session_rows
from opensquilla.session.db.rows import select_rows, values_of
from opensquilla.session.db.sql import prefix_upper_bound
from opensquilla.session.db.tables import sessions
from opensquilla.session.keys import canonicalize_key_prefix
from opensquilla.session.models import SessionNode, SessionStatus

BASE_MS = 1_700_000_000_000

# Keys that differ only after a prefix, hold LIKE wildcards and a backslash, run through
# the code point order (unicode beyond the BMP, U+10FFFF), or are one another's prefixes.
TRICKY_KEYS = [
    "agent:main:app:user:",
    "agent:main:app:user:1",
    "agent:main:app:user:10",
    "agent:main:app:user:2",
    "agent:main:app:user;",
    "agent:main:app:userX:1",
    "agent:main:app:users:1",
    "agent:main:app%:user:1",
    "agent:main:appX:user:1",
    "agent:main:app_:user:1",
    "agent:main:ap%",
    "agent:main:a_p",
    "agent:main:a\\p:1",
    "agent:main:a\\\\p:1",
    "agent:main:App:user:1",
    "agent:main:app:Ü:1",
    "agent:main:app:ü:1",
    "agent:main:app:ü:2",
    "agent:main:app:日本:1",
    "agent:main:app:日本語:1",
    "agent:main:app:\U0001f600:1",
    "agent:main:app:\U0001f600\U0001f600",
    "agent:main:app:\ud7ff:1",
    "agent:main:app:\ue000:1",
    "agent:main:app:\U0010ffff",
    "agent:main:app:\U0010ffff:1",
    "agent:main:app:\U0010ffff\U0010ffff",
    "agent:ops:app:user:1",
    "agent:ops-2:x",
    "subagent:agent:main:app:1",
    "plain:key",
    "plain:key:more",
    "plain:keys",
    "z",
]
PREFIXES = [
    "agent:main:app:user:",
    "agent:main:app:user:1",
    "agent:main:app:user",
    "agent:main:app%",
    "agent:main:app_",
    "agent:main:ap",
    "agent:main:a_",
    "agent:main:a\\",
    "agent:main:a\\\\",
    "agent:main:app:ü",
    "agent:main:app:Ü",
    "agent:main:app:日本",
    "agent:main:app:\U0001f600",
    "agent:main:app:\ud7ff",
    "agent:main:app:\U0010ffff",
    "agent:main:app:\U0010ffff\U0010ffff",
    "agent:main:",
    "agent:",
    "agent:o",
    "subagent:",
    "plain:key",
    "plain:key:more",
    "z",
    "zz",
    "\U0010ffff",
    "nothing:here",
]


async def _insert(storage: SessionStorage, nodes: list[SessionNode]) -> None:
    """Whole rows, raw (setup): many sessions in one statement."""
    async with storage.engine.begin() as conn:
        await conn.execute(sessions.insert(), [values_of(node, sessions) for node in nodes])


def _nodes(keys: list[str], rng: random.Random) -> list[SessionNode]:
    return [
        SessionNode(
            session_key=key,
            agent_id=key.split(":")[1] if key.startswith("agent:") else "main",
            status=rng.choice([SessionStatus.RUNNING, SessionStatus.DONE]),
            created_at=BASE_MS,
            updated_at=BASE_MS + rng.randrange(8),  # many ties: the key orders them
        )
        for key in keys
    ]


def _expected(nodes: list[SessionNode], prefix: str, **filters: Any) -> list[str]:
    """The listing a Python filter gives: listing order, then the prefix and filters."""
    chosen = [
        n
        for n in nodes
        if n.session_key.startswith(prefix)
        and all(getattr(n, name) == value for name, value in filters.items())
    ]
    chosen.sort(key=lambda n: (n.updated_at, n.session_key), reverse=True)
    return [n.session_key for n in chosen]


async def _walk(manager: SessionManager, limit: int, **filters: Any) -> list[str]:
    """Every keyset page of the listing, in order."""
    seen: list[str] = []
    cursor = None
    while True:
        page = await manager.list_sessions_page(limit=limit, cursor=cursor, **filters)
        seen += [n.session_key for n in page.sessions]
        if not page.has_more:
            return seen
        cursor = page.next_cursor


async def test_a_prefix_selects_exactly_the_keys_that_start_with_it(
    storage: SessionStorage, manager: SessionManager
) -> None:
    rng = random.Random(6)
    nodes = _nodes(TRICKY_KEYS, rng)
    await _insert(storage, nodes)
    for prefix in PREFIXES:
        want = _expected(nodes, prefix)
        got = [n.session_key for n in await manager.list_sessions(key_prefix=prefix, limit=None)]
        assert got == want, prefix
        assert await _walk(manager, 3, key_prefix=prefix) == want, prefix
        stored = await storage.list_sessions(key_prefix=prefix, limit=None)
        assert [n.session_key for n in stored] == want, prefix
    for key in TRICKY_KEYS:  # the prefix that is a whole key: it and its extensions
        listed = await manager.list_sessions(key_prefix=key, limit=None)
        assert [n.session_key for n in listed] == _expected(nodes, key), key
        assert key in [n.session_key for n in listed]


async def test_an_empty_prefix_filters_nothing(
    storage: SessionStorage, manager: SessionManager
) -> None:
    nodes = _nodes(TRICKY_KEYS, random.Random(1))
    await _insert(storage, nodes)
    everything = [n.session_key for n in await manager.list_sessions(limit=None)]
    assert [n.session_key for n in await manager.list_sessions(key_prefix="", limit=None)] == (
        everything
    )
    assert await _walk(manager, 5, key_prefix="") == everything == _expected(nodes, "")


async def test_the_prefix_combines_with_the_other_filters_and_with_pages(
    storage: SessionStorage, manager: SessionManager
) -> None:
    """Many users of two agents, the listing order interleaving them: each prefix, alone
    and with ``agent_id``/``status``, in the offset listing (limit and offset) and walked
    in keyset pages of several sizes: no duplicate, no gap."""
    rng = random.Random(8)
    keys = [
        f"agent:{agent}:app-{app}:user-{user}:s{i}"
        for agent in ("main", "ops")
        for app in range(3)
        for user in range(4)
        for i in range(rng.randrange(0, 9))
    ]
    nodes = _nodes(keys, rng)
    await _insert(storage, nodes)
    prefixes = ["agent:main:app-1:user-2:", "agent:ops:app-0:", "agent:main:app-2:user-", "agent:"]
    for prefix in prefixes:
        choices: list[dict[str, Any]] = [{}, {"status": "done"}, {"agent_id": "ops"}]
        for filters in [*choices, {"agent_id": "main"}]:
            want = _expected(nodes, prefix, **filters)
            got = await manager.list_sessions(key_prefix=prefix, limit=None, **filters)
            assert [n.session_key for n in got] == want, (prefix, filters)
            sliced = await manager.list_sessions(key_prefix=prefix, limit=4, offset=2, **filters)
            assert [n.session_key for n in sliced] == want[2:6]
            for size in (1, 2, 7, 50):
                assert await _walk(manager, size, key_prefix=prefix, **filters) == want
    spawned = SessionNode(
        session_key="agent:main:app-9:user-0:child",
        spawned_by="agent:main:app-9:user-0:parent",
        parent_session_key="agent:main:app-9:user-0:parent",
    )
    await storage.upsert_session(spawned)
    lineage: list[dict[str, Any]] = [
        {"spawned_by": "agent:main:app-9:user-0:parent"},
        {"parent_session_key": "agent:Main:app-9:user-0:parent"},
    ]
    for filters in lineage:
        listed = await manager.list_sessions(key_prefix="agent:main:app-9:", **filters)
        assert [n.session_key for n in listed] == [spawned.session_key]
        assert await manager.list_sessions(key_prefix="agent:main:app-8:", **filters) == []


async def test_a_complete_agent_segment_is_canonicalised_and_nothing_else(
    storage: SessionStorage, manager: SessionManager
) -> None:
    for key in ("agent:Main:App:user:1", "agent:ops:x", "subagent:agent:Ops:y", " plain:k"):
        await manager.create(key)
    listed = await manager.list_sessions(key_prefix="agent:MAIN:App:")
    assert [n.session_key for n in listed] == ["agent:main:App:user:1"]
    assert await manager.list_sessions(key_prefix="agent:main:app:") == []  # no case folding
    assert await manager.list_sessions(key_prefix="agent:Ma") == []  # incomplete: as given
    assert [n.session_key for n in await manager.list_sessions(key_prefix="agent:ma")] == [
        "agent:main:App:user:1"
    ]
    sub = await manager.list_sessions(key_prefix="subagent:agent:OPS:")
    assert [n.session_key for n in sub] == ["subagent:agent:ops:y"]
    assert await manager.list_sessions(key_prefix=" plain") == []  # keys are trimmed, not it
    assert [n.session_key for n in await manager.list_sessions(key_prefix="plain:")] == ["plain:k"]
    assert canonicalize_key_prefix("agent::x") == "agent:main:x"
    assert canonicalize_key_prefix("agent:") == "agent:"
    assert canonicalize_key_prefix("agent:Default:") == "agent:main:"


@pytest.mark.backend_free
@pytest.mark.parametrize(
    ("prefix", "upper"),
    [
        ("", None),
        ("a", "b"),
        ("ab", "ac"),
        ("a\ud7ff", "a\ue000"),
        ("a\U0010ffff", "b"),
        ("ab\U0010ffff\U0010ffff", "ac"),
        ("\U0010ffff", None),
        ("\U0010ffff\U0010ffff", None),
        ("%_", "%`"),
    ],
)
def test_the_upper_bound_of_a_prefix(prefix: str, upper: str | None) -> None:
    assert prefix_upper_bound(prefix) == upper
    if upper is not None:
        assert prefix < upper
        assert not upper.startswith(prefix)


# -- the plans --------------------------------------------------------------------------


def _listing(conn: Any, prefix: str, *, after: tuple[int, str] | None = None) -> str:
    """The listing statement with its values inline (what EXPLAIN reads)."""
    query = session_rows._filtered(
        select_rows(sessions, conn), {"key_prefix": prefix}, conn.dialect.name
    )
    if after is not None:
        query = query.where(sa.tuple_(sessions.c.updated_at, sessions.c.session_key) < after)
    query = query.order_by(*session_rows.ACTIVITY_ORDER).limit(51)
    return str(query.compile(dialect=conn.dialect, compile_kwargs={"literal_binds": True}))


async def _users(storage: SessionStorage, users: int, per_user: int) -> None:
    rng = random.Random(3)
    keys = [f"agent:main:app:u{u:03d}:s{i:03d}" for u in range(users) for i in range(per_user)]
    nodes = _nodes(keys, rng)
    for n in nodes:
        n.updated_at = BASE_MS + rng.randrange(10**6)
    await _insert(storage, nodes)


async def test_postgres_serves_the_prefix_from_the_key_prefix_index(
    storage: SessionStorage, backend: Any
) -> None:
    """3,000 sessions of 100 users, ``ANALYZE`` run (the statistics a live table has): the
    planner reads one user's 30 sessions through ``idx_sessions_key_prefix`` (the range on
    ``session_key COLLATE "C"``), then sorts them; not the whole listing order. Statistics,
    not ``enable_seqscan = off``: with it off the planner may still walk
    ``idx_sessions_updated_at`` backward and filter, which an index of sessions but not the
    plan that keeps the page flat."""
    if not backend.is_postgres:
        pytest.skip("PostgreSQL's plan; SQLite's is the next test")
    await _users(storage, 100, 30)
    async with storage.engine.connect() as conn:
        await conn.execute(sa.text("ANALYZE sessions"))
        for after in (None, (BASE_MS + 10**6, "agent:main:app:u042:s999")):
            sql = _listing(conn, "agent:main:app:u042:", after=after)
            plan = "\n".join(r[0] for r in await conn.execute(sa.text("EXPLAIN " + sql)))
            # Partitioned (tests(postgres-partitioned)): each partition's copy of the index.
            assert re.search(r"idx_sessions_key_prefix|sessions_p\d+_session_key_idx", plan), plan
            assert "Index Cond" in plan and "agent:main:app:u042:" in plan, plan
        await conn.rollback()
    manager = SessionManager(storage)
    page = await manager.list_sessions_page(limit=20, key_prefix="agent:main:app:u042:")
    assert len(page.sessions) == 20 and page.has_more


async def test_sqlite_serves_the_prefix_from_the_primary_key_index(
    storage: SessionStorage, backend: Any
) -> None:
    """SQLite reads the range on the primary key's index (BINARY: byte order), with or
    without a cursor, then sorts the few rows it found."""
    if backend.is_postgres:
        pytest.skip("SQLite's plan; PostgreSQL's is the test before")
    await _users(storage, 100, 30)
    async with storage.engine.connect() as conn:
        await conn.execute(sa.text("ANALYZE"))
        for after in (None, (BASE_MS + 10**6, "agent:main:app:u042:s999")):
            sql = _listing(conn, "agent:main:app:u042:", after=after)
            rows = await conn.execute(sa.text("EXPLAIN QUERY PLAN " + sql))
            plan = "\n".join(str(r[-1]) for r in rows)
            assert "USING INDEX sqlite_autoindex_sessions_1 (session_key>? AND session_key<?)" in (
                plan
            ), plan
        await conn.rollback()


async def test_postgres_compares_bytes_whatever_the_column_collation(
    storage: SessionStorage, manager: SessionManager, backend: Any
) -> None:
    """A database made with a linguistic collation gives ``session_key`` that collation
    (ICU here, where ``App`` sorts beside ``app`` and punctuation has an order of its
    own): the range is compared ``COLLATE "C"``, so the prefix stays byte-exact. The
    column's collation is put back afterwards (the test database is reused)."""
    if not backend.is_postgres:
        pytest.skip("a PostgreSQL column collation")
    if backend.partitioned:  # PostgreSQL refuses to alter a partition key column's type
        pytest.skip("the partition key's collation is fixed when the table is created")
    nodes = _nodes(TRICKY_KEYS, random.Random(5))
    await _insert(storage, nodes)
    alter = 'ALTER TABLE sessions ALTER COLUMN session_key TYPE TEXT COLLATE "{}"'
    async with storage.engine.begin() as conn:
        await conn.execute(sa.text(alter.format("en-x-icu")))
    try:
        async with storage.engine.connect() as conn:  # the collation has teeth
            unbounded = sa.select(sa.func.count()).where(
                sessions.c.session_key >= "agent:main:ap", sessions.c.session_key < "agent:main:aq"
            )
            linguistic = (await conn.execute(unbounded)).scalar_one()
            assert linguistic != len(_expected(nodes, "agent:main:ap"))
        for prefix in PREFIXES:
            got = await manager.list_sessions(key_prefix=prefix, limit=None)
            assert sorted(n.session_key for n in got) == sorted(_expected(nodes, prefix)), prefix
    finally:
        async with storage.engine.begin() as conn:
            await conn.execute(sa.text(alter.format("default")))
