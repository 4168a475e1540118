"""How the direct path plans its statement (``db/direct_statement.py``): per statement
object, once; not at all where it cannot run (the Connection then runs it as built); in
the store's schema."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from sqlalchemy import text

from opensquilla.session import SessionManager, SessionStorage
from opensquilla.session.db import direct_statement, uow_writes
from opensquilla.session.db.repos import batch_statements, fenced_append
from tests.storage.direct_paths import KEY, entry, paths


@pytest.mark.postgres_only
@pytest.mark.parametrize("name", ["_invalidate_schema_cache", "_invalidate_schema_cache_asof"])
async def test_a_missing_private_dialect_hook_means_the_connection_path(
    storage: SessionStorage, manager: SessionManager, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """Should SQLAlchemy rename the asyncpg dialect's statement-cache hooks the direct path
    uses, the statement is not planned there (``None``: the Connection path)."""
    node = await manager.create(KEY)
    engine = storage.engine.sync_engine
    stmt, params = fenced_append.one_statement_append(
        "postgresql", entry(node, "x"), expected_epoch=0, now=1, token_delta=0
    )
    assert direct_statement._compile(engine, stmt, tuple(params)) is not None
    owner = next(k for k in type(engine.dialect).__mro__ if name in vars(k))
    monkeypatch.delattr(owner, name)
    assert direct_statement._compile(engine, stmt, tuple(params)) is None


async def test_the_plan_cache_never_hands_out_another_statements_plan(
    storage: SessionStorage, manager: SessionManager
) -> None:
    """Plans are cached per statement object, not per ``id()`` alone (an id is reused
    once its object is gone): a cached entry under the same id for another statement is
    not this statement's plan."""
    node = await manager.create(KEY)
    engine = storage.engine.sync_engine
    stmt, params = fenced_append.one_statement_append(
        engine.dialect.name, entry(node, "x"), expected_epoch=0, now=1, token_delta=0
    )
    keys = tuple(params)
    plan = direct_statement.plan_for(engine, stmt, keys)
    assert plan is not None and direct_statement.plan_for(engine, stmt, keys) is plan
    other = text("SELECT 1")
    plans = direct_statement._PLANS[engine.dialect]
    saved = dict(plans)
    try:
        plans.clear()
        plans[(id(other), keys)] = (stmt, plan)  # as if `other` reused a dead statement's id
        found = direct_statement.plan_for(engine, other, keys)
        assert found is None or (
            isinstance(found, direct_statement.Plan) and found.sql == "SELECT 1"
        )
    finally:
        plans.clear()
        plans.update(saved)


async def test_an_unplanned_statement_is_built_once(
    manager: SessionManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A statement the direct path cannot run (no plan) goes to the Connection as built,
    not built again."""
    await manager.create(KEY)
    built: list[Any] = []
    original = fenced_append.one_statement_append

    def building(*args: Any, **kwargs: Any) -> Any:
        built.append(args)
        return original(*args, **kwargs)

    monkeypatch.setattr(fenced_append, "one_statement_append", building)
    monkeypatch.setattr(uow_writes, "plan_for", lambda *args: None)
    with paths(monkeypatch) as taken:
        await manager.append_message(KEY, "user", "unplanned", token_count=2)
    assert taken == ["connection"] and len(built) == 1


@pytest.mark.postgres_only
async def test_the_direct_path_appends_into_the_stores_schema(
    empty_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``schema=``: the direct path's statement runs on the schema's search path, its row
    in the schema's table, the public schema untouched."""
    async with SessionStorage(empty_database, schema="direct_s") as storage:
        manager = SessionManager(storage, inject_time_prefix=False)
        await manager.create(KEY)
        with paths(monkeypatch) as taken:
            await manager.append_message(KEY, "user", "in the schema")
        assert taken == ["direct"]
        async with storage.engine.connect() as conn:
            counted = await conn.execute(text("SELECT count(*) FROM direct_s.transcript_entries"))
            assert counted.scalar_one() == 1
            public = await conn.execute(text("SELECT to_regclass('public.transcript_entries')"))
            assert public.scalar_one() is None
        assert [e.content for e in await manager.get_transcript(KEY)] == ["in the schema"]


async def test_values_read_by_name_are_the_execution_contexts(
    storage: SessionStorage, manager: SessionManager
) -> None:
    """The append's and the batch's plans read their values from the parameters by name
    (``Plan.by_name``) rather than through SQLAlchemy's ``construct_params``: the same
    DBAPI values either way; and a statement with ``.params()`` values keeps the
    general route."""
    node = await manager.create(KEY)
    engine = storage.engine.sync_engine
    dialect = engine.dialect.name
    metadata = {"b": 1, "a": [float("1e300"), "\u00e9"]}
    first = entry(node, "x")
    first.metadata = metadata
    stmt, params = fenced_append.one_statement_append(
        dialect, first, expected_epoch=0, now=1, token_delta=3
    )
    batch = batch_statements.batch_insert(dialect, 2, tokens=True, touch=True, floor=True)
    rows = {
        **fenced_append.touch_params(first, 0, 1, 3),
        "fence_session_id": node.session_id,
        **batch_statements.row_params([first, entry(node, "y")]),
    }
    for statement, values in ((stmt, params), (batch, rows)):
        plan = direct_statement._compile(engine, statement, tuple(values))
        assert plan is not None and plan.by_name
        general = dataclasses.replace(plan, by_name=False)
        assert list(plan.values(values)) == list(general.values(values))
    given = text("SELECT :a, :b").bindparams(b=2)
    plan = direct_statement._compile(engine, given, ("a",))
    assert plan is None or not plan.by_name
