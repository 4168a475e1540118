"""Bulk reads take the driver's rows and convert them themselves (``db/rows.to_models``):
pinned to SQLAlchemy's own result processing, for every table, on the backend under test.

``driver_converters`` says which columns need converting on each backend; if SQLAlchemy
ever processes another column (a new column type, a new dialect behaviour), or our rule
misses one, these tests fail, because records read through SQLAlchemy's ``Row`` objects
must equal, type by type, the records the fast path built from the same rows.
"""

from __future__ import annotations

import gc
from typing import Any

import pytest

from opensquilla.session import SessionStorage
from opensquilla.session.db import rows
from opensquilla.session.db.repos.transcript import TranscriptRepository
from opensquilla.session.db.rows import (
    MODEL_FOR_TABLE,
    driver_converters,
    select_rows,
    to_model,
    to_models,
)
from opensquilla.session.db.tables import TABLES
from opensquilla.session.db.types import MARKER
from opensquilla.session.models import _Record

from . import add_entry, add_state, add_summary, archived, insert_archive, new_session

AWKWARD = "nul\x00inside"


async def _fill_every_table(storage: SessionStorage) -> None:
    """Rows whose values need every kind of conversion: NUL text, the escape marker,
    JSON of each shape, booleans both ways, integral floats."""
    node = await new_session(
        storage,
        "agent:main:fast",
        label=AWKWARD,
        subject=MARKER + "x",
        fast_mode=True,
        total_tokens_fresh=True,
        estimated_cost_usd=2.0,
        delivery_context={"to": AWKWARD, "n": [1, 2.5]},
    )
    await new_session(storage, "agent:main:plain")
    await add_entry(storage, node, AWKWARD, reasoning_content=MARKER)
    await add_entry(
        storage,
        node,
        None,
        role="assistant",
        tool_calls=[{"id": "call_1", "type": "function"}],
        turn_usage={"input": 3, "cost": 0.5},
        turn_context={"k": None},
        token_count=7,
    )
    await insert_archive(storage, [archived(node, 1, AWKWARD, reasoning_content="r")])
    await add_summary(
        storage,
        node,
        AWKWARD,
        summary_payload={"a": [AWKWARD]},
        missing_obligations=["x"],
        trigger_reason=MARKER,
    )
    await add_state(storage, node, payload={"p": 1.0}, portable=True, valid=False, model=AWKWARD)
    await add_state(storage, node, kind="other", cacheable=True)


def _same(fast: list[_Record], reference: list[_Record]) -> None:
    assert fast == reference
    for built, expected in zip(fast, reference, strict=True):
        for name, value in expected.__dict__.items():
            assert type(built.__dict__[name]) is type(value), name


async def test_driver_converters_do_what_sqlalchemy_would(storage: SessionStorage) -> None:
    """The columns we convert are the ones SQLAlchemy processes (plus, on SQLite, the JSON
    columns ``read_columns`` reads as text)."""
    async with storage.engine.connect() as conn:
        dialect = conn.dialect.name
        for table in TABLES:
            result = await conn.execute(select_rows(table, conn))
            keys = tuple(result.keys())
            processed = {
                key
                for key, processor in zip(keys, result._metadata._processors, strict=True)  # type: ignore[union-attr]
                if processor is not None
            }
            result.close()
            model = MODEL_FOR_TABLE[table.name]
            converted = {name for name, _ in driver_converters(model, keys, dialect)}
            json_text = {c.name for c in table.columns if c.name in rows.JSON_COLUMNS}
            if dialect == "sqlite":
                assert converted == processed | json_text, table.name
            else:
                assert converted == processed, table.name


async def test_fast_reads_equal_sqlalchemy_rows_for_every_table(storage: SessionStorage) -> None:
    await _fill_every_table(storage)
    async with storage.engine.connect() as conn:
        dialect = conn.dialect.name
        for table in TABLES:
            model = MODEL_FOR_TABLE[table.name]
            query = select_rows(table, conn).order_by(*table.primary_key.columns)
            reference = [to_model(model, row, dialect) for row in (await conn.execute(query)).all()]
            assert reference, table.name
            _same(to_models(model, dialect, await conn.execute(query)), reference)


async def test_reads_larger_than_a_partition_keep_every_row_in_order(
    storage: SessionStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = await new_session(storage, "agent:main:many")
    for i in range(7):
        await add_entry(storage, node, f"m{i}", tool_calls=[{"i": i}] if i % 2 else None)
    monkeypatch.setattr(rows, "PARTITION_ROWS", 3)
    entries = await storage.get_transcript(node.session_id)
    assert [e.content for e in entries] == [f"m{i}" for i in range(7)]
    assert [e.tool_calls for e in entries] == [[{"i": i}] if i % 2 else None for i in range(7)]
    async with storage.engine.connect() as conn:
        reference = await TranscriptRepository(conn).list_live(
            node.session_id, session_key=node.session_key
        )
    assert entries == reference


async def test_a_read_leaves_the_collector_as_it_found_it(
    storage: SessionStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = await new_session(storage, "agent:main:gc")
    await add_entry(storage, node, "x")
    assert gc.isenabled()
    await storage.get_transcript(node.session_id)
    assert gc.isenabled()

    def broken(value: Any) -> Any:
        raise RuntimeError("converter failed")

    monkeypatch.setattr(
        rows, "driver_converters", lambda *args: (("content", broken),), raising=True
    )
    with pytest.raises(RuntimeError, match="converter failed"):
        await storage.get_transcript(node.session_id)
    assert gc.isenabled()
    gc.disable()
    try:
        monkeypatch.undo()
        await storage.get_transcript(node.session_id)
        assert not gc.isenabled()
    finally:
        gc.enable()
