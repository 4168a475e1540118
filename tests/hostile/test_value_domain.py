"""One value domain on both backends, validated in the models (issue 11, item 9).

SQLite took what Postgres refused (integers beyond 32 bits in 32-bit columns, NUL in
lineage keys, index entries beyond a Postgres btree page) and Postgres took what SQLite
refused (NaN), so a database written on one could not be copied to the other. The models
now carry each column's domain; these tests keep the models and ``db/tables.py`` in step,
prove the largest values every index accepts really fit on Postgres, and check that what
the models accept round-trips exactly on both backends.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import BigInteger, Boolean, Float, Integer, Table

from opensquilla.session import SessionManager, SessionStorage
from opensquilla.session.db import rows, tables
from opensquilla.session.db.types import MARKER, LosslessText
from opensquilla.session.errors import InvalidInputError
from opensquilla.session.keys import MAX_SESSION_KEY_LENGTH
from opensquilla.session.models import (
    INT32_MAX,
    INT32_MIN,
    INT64_MAX,
    INT64_MIN,
    SessionContextState,
    SessionNode,
    SessionSummary,
    TranscriptEntry,
    _Record,
)

from .test_bad_input_errors import refused, wide_text

KEY = "agent:main:domain"
COLUMN_RANGE = {"int32": (INT32_MIN, INT32_MAX), "int64": (INT64_MIN, INT64_MAX)}
# A PostgreSQL btree entry may be at most 2704 bytes (8 kB pages, btree version 4).
PG_BTREE_MAX_ENTRY = 2704


def _integer_kind(column: sa.Column[Any]) -> str | None:
    kind = column.type
    if isinstance(kind, BigInteger):  # BigInteger is an Integer too: test it first
        return "int64"
    if isinstance(kind, Integer):
        return "int32"
    return None


def _field_schema(model: type[_Record], name: str) -> dict[str, Any]:
    """The field's JSON schema (of its non-null branch for an optional field)."""
    schema: dict[str, Any] = model.model_json_schema()["properties"][name]
    for branch in schema.get("anyOf", ()):
        if branch.get("type") != "null":
            return {**branch, **{k: v for k, v in schema.items() if k != "anyOf"}}
    return schema


def _table(name: str) -> Table:
    return tables.Base.metadata.tables[name]


# -- the models and the tables agree ---------------------------------------------------------


@pytest.mark.parametrize("table_name", list(rows.MODEL_FOR_TABLE))
def test_model_integer_domains_are_the_column_types_of_the_table(table_name: str) -> None:
    """Every integer field accepts exactly its column's range (an Integer column is 32-bit,
    a BigInteger column 64-bit), or its non-negative half for counts, so the two can never
    drift apart again."""
    model = rows.MODEL_FOR_TABLE[table_name]
    checked = 0
    for column in _table(table_name).columns:
        kind = _integer_kind(column)
        if kind is None:
            continue
        low, high = COLUMN_RANGE[kind]
        schema = _field_schema(model, column.name)
        assert schema.get("type") == "integer", (column.name, schema)
        assert schema.get("maximum") == high, (column.name, kind, schema)
        assert schema.get("minimum") in (low, 0), (column.name, kind, schema)
        checked += 1
    assert checked >= 4


@pytest.mark.parametrize("table_name", list(rows.MODEL_FOR_TABLE))
def test_every_float_and_boolean_field_refuses_what_one_backend_would_change(
    table_name: str,
) -> None:
    """A float column takes no NaN or infinity (SQLite stores NaN as NULL), a boolean no
    1 or "yes" (SQLite would store the integer or the text)."""
    model = rows.MODEL_FOR_TABLE[table_name]
    required = {
        "session_key": KEY,
        "session_id": "s",
        "role": "user",
        "summary_text": "t",
        "state_kind": "k",
    }
    base = {name: value for name, value in required.items() if name in model.model_fields}
    for column in _table(table_name).columns:
        if isinstance(getattr(column.type, "impl_instance", column.type), Float):
            bad: tuple[Any, ...] = (float("nan"), float("inf"), -float("inf"), True, "1.0")
        elif isinstance(column.type, Boolean):
            bad = (1, 0, "yes", None)
        else:
            continue
        for value in bad:
            with pytest.raises(InvalidInputError, match=column.name):
                model(**base, **{column.name: value})


def _entry_bytes(table: Table, column: sa.Column[Any], model: type[_Record]) -> int:
    """The most bytes ``column`` can take in a Postgres index entry, by the model's bounds."""
    if isinstance(column.type, BigInteger):
        return 8
    if isinstance(column.type, Integer):
        return 4
    if isinstance(column.type, Boolean):
        return 1
    if column.name == "session_key":
        characters = MAX_SESSION_KEY_LENGTH
    else:
        bound = _field_schema(model, column.name).get("maxLength")
        assert bound is not None, f"{table.name}.{column.name} is indexed but unbounded"
        characters = bound
    marker = len(MARKER.encode()) if isinstance(column.type, LosslessText) else 0
    # 4 bytes of UTF-8 per character at most, the escape marker, a 4-byte varlena header
    # and up to 3 bytes of alignment.
    return 4 * characters + marker + 4 + 3


def test_every_index_entry_fits_a_postgres_btree_page_by_the_model_bounds() -> None:
    """Each indexed text column has a bound in the model, and for every index (composite
    ones add up) the largest entry the models allow stays within the btree limit."""
    indexes = 0
    for table_name, model in rows.MODEL_FOR_TABLE.items():
        table = _table(table_name)
        for index in [*table.indexes, table.primary_key]:
            columns = list(index.columns)
            size = 8 + sum(_entry_bytes(table, column, model) for column in columns)
            assert size <= PG_BTREE_MAX_ENTRY, (index.name, size)
            indexes += 1
    assert indexes >= 15


# -- the largest values really fit on Postgres, and round-trip everywhere -----------------


def _widest(limit: int, seed: int, *, lossless: bool = False) -> str:
    """A value at ``limit`` characters, each 4 bytes; ``lossless`` starts it with the escape
    marker so that Postgres stores it escaped (the marker doubled: the largest form)."""
    if lossless:
        return MARKER + wide_text(limit - 1, seed)
    return wide_text(limit, seed)


async def test_the_largest_values_every_index_allows_are_stored_and_read_back(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """On Postgres this is the proof that the bounds fit every index, composite ones
    included: the session key, session id, workspace id, compaction id, state kind and
    provider at their limits, each character 4 bytes and incompressible."""
    key = _widest(MAX_SESSION_KEY_LENGTH, 1)
    session_id = _widest(256, 2)
    compaction_id = _widest(256, 3)
    node = SessionNode(
        session_key=key, session_id=session_id, workspace_id=_widest(512, 4, lossless=True)
    )
    await storage.upsert_session(node)
    assert await manager.get_session(key) == node

    for n in range(8):
        role = "user" if n % 2 == 0 else "assistant"
        await manager.append_message(key, role, f"message {n} " * 30, token_count=500)
    written = await manager.get_transcript(key)
    result = await manager.compact_with_result(key, 2000, compaction_id=compaction_id)
    assert result.removed_count > 0
    assert await manager.get_canonical_transcript(key) == written
    (summary,) = await manager.get_summaries(key)
    assert summary.compaction_id == compaction_id
    archived = await storage.get_compacted_transcript_entries(
        session_id, compaction_id=compaction_id
    )
    assert len(archived) == result.removed_count

    state = await manager.save_context_state(
        SessionContextState(
            session_id=session_id,
            session_key=key,
            provider=_widest(64, 5, lossless=True),
            state_kind=_widest(64, 6, lossless=True),
            payload={"k": "v"},
        )
    )
    found = await manager.get_context_states(
        key, provider=state.provider, state_kind=state.state_kind
    )
    assert found == [state]

    child = _widest(MAX_SESSION_KEY_LENGTH, 7)
    branched = await manager.branch(key, child, fork_transcript=True)
    assert branched.parent_session_key == key and branched.spawned_by == key
    copied = await manager.get_canonical_transcript(child)
    assert [(e.role, e.content, e.token_count) for e in copied] == [
        (e.role, e.content, e.token_count) for e in written
    ]


@pytest.mark.parametrize(
    ("model", "field", "limit"),
    [
        (SessionNode, "session_id", 256),
        (SessionNode, "workspace_id", 512),
        (SessionNode, "label", 512),
        (SessionSummary, "compaction_id", 256),
        (SessionContextState, "provider", 64),
        (SessionContextState, "state_kind", 64),
        (TranscriptEntry, "session_id", 256),
    ],
)
def test_one_character_beyond_an_index_bound_is_refused(
    model: type[_Record], field: str, limit: int
) -> None:
    required = {"session_key": KEY, "session_id": "s", "role": "user", "summary_text": "t"}
    required["state_kind"] = "k"
    base = {name: value for name, value in required.items() if name in model.model_fields}
    model(**{**base, field: "x" * limit})
    with pytest.raises(InvalidInputError, match=rf"{field}.*at most {limit} characters"):
        model(**{**base, field: "x" * (limit + 1)})


async def test_integers_at_the_edges_of_their_columns_round_trip_on_both_backends(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """The smallest and largest value of every integer field is accepted and reads back
    exactly; one beyond is refused, before anything is written."""
    for edge, index in (("low", 0), ("high", 1)):
        values: dict[str, int] = {}
        for column in tables.sessions.columns:
            kind = _integer_kind(column)
            if kind is None:
                continue
            schema = _field_schema(SessionNode, column.name)
            values[column.name] = (schema["minimum"], schema["maximum"])[index]
        node = SessionNode(session_key=f"{KEY}:{edge}", **values)
        await storage.upsert_session(node)
        assert await storage.get_session(node.session_key) == node

        entry_values: dict[str, int] = {}
        for column in tables.transcript_entries.columns:
            if _integer_kind(column) is None or column.name == "id":
                continue
            schema = _field_schema(TranscriptEntry, column.name)
            entry_values[column.name] = (schema["minimum"], schema["maximum"])[index]
        entry = TranscriptEntry(
            session_id=node.session_id, session_key=node.session_key, role="user", **entry_values
        )
        await storage.append_transcript_entry(entry)
        assert await storage.get_transcript(node.session_id) == [entry]

        state = SessionContextState(
            session_id=node.session_id,
            session_key=node.session_key,
            state_kind="edge",
            covered_through_id=(INT64_MIN, INT64_MAX)[index],
            expires_at=(INT64_MIN, INT64_MAX)[index],
            created_at=(INT64_MIN, INT64_MAX)[index],
            schema_version=(INT32_MIN, INT32_MAX)[index],
        )
        await storage.save_context_state(state)
        assert await storage.get_context_states(node.session_key) == [state]

    node = await manager.create(KEY)
    for field, beyond in {
        "spawn_depth": INT32_MAX + 1,
        "model_routing_revision": INT64_MAX + 1,
        "collaboration_revision": INT64_MIN - 1,
        "missing_cost_entries": -1,
        "runtime_ms": INT64_MAX + 1,
    }.items():
        await refused(storage, lambda f=field, b=beyond: manager.update(KEY, **{f: b}), names=field)
    for field, beyond in {"compaction_count": INT32_MAX + 1, "epoch": -1}.items():
        await refused(
            storage,
            lambda f=field, b=beyond: storage.upsert_session(node.model_copy(update={f: b})),
            names=field,
        )


async def test_revision_counters_take_64_bit_values_on_both_backends(
    manager: SessionManager,
) -> None:
    """``model_routing_revision`` and ``collaboration_revision`` may be clocks in
    milliseconds: 64-bit on both backends (the columns were widened)."""
    await manager.create(KEY)
    millis = 1_796_000_000_000
    node = await manager.update(KEY, model_routing_revision=millis, collaboration_revision=millis)
    assert (node.model_routing_revision, node.collaboration_revision) == (millis, millis)
    assert await manager.get_session(KEY) == node


# -- keys and identifiers -------------------------------------------------------------------


async def test_lineage_keys_are_canonical_and_checked_like_every_key(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """``parent_session_key`` and ``spawned_by`` were checked (and canonicalised) only by
    ``update()``; ``create()``, ``upsert_session()`` and a record stored NUL on SQLite,
    which Postgres refuses."""
    node = await manager.create(
        KEY, parent_session_key=" agent:Main:parent ", spawned_by="webchat:default"
    )
    assert (node.parent_session_key, node.spawned_by) == (
        "agent:main:parent",
        "agent:main:webchat:default",
    )
    assert await manager.get_session(KEY) == node
    updated = await manager.update(KEY, spawned_by="agent:OPS:x")
    assert updated.spawned_by == "agent:ops:x"
    assert (await storage.list_sessions(spawned_by="agent:ops:x"))[0].session_key == KEY

    for field in ("parent_session_key", "spawned_by"):
        for bad in ("parent\x00key", "agent:main:" + "k" * 600, "\udc00", 5):
            await refused(
                storage, lambda f=field, b=bad: manager.update(KEY, **{f: b}), names=field
            )
            await refused(
                storage,
                lambda f=field, b=bad: manager.create("agent:main:other", **{f: b}),
                names=field,
            )
            await refused(
                storage,
                lambda f=field, b=bad: storage.upsert_session(
                    SessionNode(session_key="agent:main:other", **{f: b})
                ),
                names=field,
            )


@pytest.mark.parametrize(
    "field",
    ["session_id", "message_id", "tool_call_id", "provenance_origin_session_id"],
)
def test_identifiers_refuse_nul_and_surrogates(field: str) -> None:
    """Identifiers are plain text on both backends: Postgres cannot store NUL in them and
    neither backend an unpaired surrogate, so the model refuses both alike."""
    for bad in ("id\x00", "id\ud800"):
        values = {"session_id": "s", "session_key": KEY, "role": "user", field: bad}
        with pytest.raises(InvalidInputError, match=field):
            TranscriptEntry(**values)


def test_an_empty_key_or_session_id_is_refused_in_every_record() -> None:
    for model in (SessionNode, TranscriptEntry, SessionSummary, SessionContextState):
        base = {"session_key": KEY, "session_id": "s", "role": "user", "summary_text": "t"}
        base["state_kind"] = "k"
        values = {name: value for name, value in base.items() if name in model.model_fields}
        with pytest.raises(InvalidInputError, match="session_key"):
            model(**{**values, "session_key": "   "})
        if "session_id" in model.model_fields:
            with pytest.raises(InvalidInputError, match="session_id"):
                model(**{**values, "session_id": ""})


# -- legacy rows ----------------------------------------------------------------------------


async def test_rows_outside_the_domain_written_before_it_still_load(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """Validation applies to writes: a row an older version wrote (an unknown status, a
    negative count, a long state kind) still reads, and a narrow update of another field
    still works."""
    node = await manager.create(KEY)
    long_kind = "legacy-kind-" + "k" * 200
    async with storage.engine.begin() as conn:
        await conn.execute(
            sa.update(tables.sessions)
            .where(tables.sessions.c.session_key == KEY)
            .values(status="legacy-status", total_tokens=-5, chat_type="dm")
        )
        await conn.execute(
            sa.insert(tables.session_context_states).values(
                session_id=node.session_id,
                session_key=KEY,
                provider="portable",
                state_kind=long_kind,
                payload={},
                created_at=1,
            )
        )
    legacy = await manager.get_session(KEY)
    assert legacy is not None
    assert (legacy.status, legacy.total_tokens, legacy.chat_type) == ("legacy-status", -5, "dm")
    assert [s.state_kind for s in await manager.get_context_states(KEY)] == [long_kind]
    updated = await manager.update(KEY, label="still writable")
    assert (updated.label, updated.status, updated.total_tokens) == (
        "still writable",
        "legacy-status",
        -5,
    )
    await manager.append_message(KEY, "user", "and appendable", token_count=3)
    assert (await manager.get_session(KEY)).total_tokens == -2  # type: ignore[union-attr]


# -- one zero (issue 31, item 3) ------------------------------------------------------------


def _signs_of_zeros(value: Any) -> list[float]:
    """``copysign(1, z)`` of every float zero in ``value``."""
    if isinstance(value, float):
        return [math.copysign(1.0, value)] if value == 0.0 else []
    if isinstance(value, dict):
        return [sign for inner in value.values() for sign in _signs_of_zeros(inner)]
    if isinstance(value, list | tuple):
        return [sign for inner in value for sign in _signs_of_zeros(inner)]
    return []


async def test_a_negative_zero_is_stored_as_zero_on_both_backends(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """``jsonb`` has no negative zero and SQLite's ``REAL`` stores one as the integer 0,
    while SQLite's JSON text and PostgreSQL's ``double precision`` kept it: the same write
    read back differently on the two backends, so a copy between them could never verify.
    Now both store 0.0, in JSON and in float columns."""
    zeros = {"n": -0.0, "l": [-0.0, 1.5, {"deep": -0.0}], "keep": -0.05}
    await manager.create(KEY, origin=zeros, delivery_context={"z": -0.0})
    await manager.update(KEY, estimated_cost_usd=-0.0, total_cost_usd=-0.0)
    await manager.append_message(
        KEY, "assistant", "hi", turn_usage={"cost": -0.0}, tool_calls=[{"id": "t", "x": -0.0}]
    )
    node = await manager.get_session(KEY)
    assert node is not None
    entries = await manager.get_transcript(KEY)
    values = [
        node.origin,
        node.delivery_context,
        node.estimated_cost_usd,
        node.total_cost_usd,
        entries[0].turn_usage,
        entries[0].tool_calls,
    ]
    signs = _signs_of_zeros(values)
    assert len(signs) == 8 and set(signs) == {1.0}, values
    assert node.origin is not None and node.origin["keep"] == -0.05


async def test_a_negative_zero_written_before_the_rule_reads_back_as_zero(
    storage: SessionStorage, manager: SessionManager
) -> None:
    """Rows written by an earlier release may hold ``-0.0`` where the backend kept it
    (SQLite JSON text, PostgreSQL ``double precision``); they read back in the domain."""
    await manager.create(KEY)
    document = sa.literal_column("'{\"n\": -0.0}'")
    async with storage.engine.begin() as conn:
        await conn.execute(
            sa.update(tables.sessions)
            .where(tables.sessions.c.session_key == KEY)
            .values(
                origin=document if not storage.uow.is_postgres else {"n": 0.0},
                estimated_cost_usd=sa.literal_column("CAST('-0' AS DOUBLE PRECISION)"),
            )
        )
    node = await manager.get_session(KEY)
    assert node is not None and node.origin == {"n": 0.0}
    assert _signs_of_zeros([node.origin, node.estimated_cost_usd]) == [1.0, 1.0]
