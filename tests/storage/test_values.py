"""Values round-trip exactly on both backends, or are refused with nothing written
(DESIGN §4: encode losslessly at the type layer, never drop or silently replace).

PostgreSQL refuses NUL in ``text`` and ``\\u0000`` in ``jsonb``; SQLite stores both. A
transcript must read back the same on either, including strings that look like the
escaped form, and a value no backend can store must fail before a single row changes.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from opensquilla.session import SessionStorage
from opensquilla.session.db.types import MARKER
from opensquilla.session.errors import InvalidInputError
from opensquilla.session.models import (
    SessionContextState,
    SessionNode,
    SessionSummary,
    TranscriptEntry,
)
from tests.helpers import table_snapshot

from . import archived, insert_archive, new_session

KEY = "agent:main:main"

AWKWARD: dict[str, str] = {
    "nul": "before\x00after",
    "only_nul": "\x00",
    "nuls": "\x00\x00x\x00",
    "marker_prefix": MARKER + "looks escaped",
    "marker_only": MARKER,
    "marker_then_escape": MARKER + "\\0\\\\",
    "marker_and_nul": MARKER + "\x00" + MARKER,
    "marker_inside": "mid" + MARKER + "dle",
    "backslashes": "C:\\temp\\0\\\\new\\n",
    "escape_lookalike": "\\0",
    "json_escape_lookalike": "\\u0000 and \\\\u0000",
    "emoji": "🦑 squid 👩‍👩‍👧 family 🏳️‍🌈",
    "cjk": "中文字符 日本語のテキスト 한국어",
    "right_to_left": "مرحبا بالعالم שלום \u202eevil\u202c",
    "controls": "\x01\x07\x1b[31m\x7f\t\r\n",
    "combining": "e\u0301 vs \u00e9",
    "noncharacters": "\ufffe\uffff\U0010ffff",
    "empty": "",
}

LONE_SURROGATE = "bad \ud800 text"


def _json_with(value: str) -> dict[str, Any]:
    """``value`` as a key and a value, at the top and nested."""
    return {value: value, "nested": [value, {value: [value, 1, None, True]}], "n": 1.5}


# -- round trips -------------------------------------------------------------------------

_property_text = st.text(
    alphabet=st.one_of(
        st.sampled_from(["\x00", "\\", "u", "0", MARKER, "é", "🦑"]),
        st.characters(codec="utf-8"),
    ),
    max_size=20,
)
_property_json = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**53), max_value=2**53),
        st.floats(allow_nan=False, allow_infinity=False),
        _property_text,
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(_property_text, inner, max_size=3)
    ),
    max_leaves=12,
)


@settings(max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=_property_text, document=_property_json)
async def test_any_text_and_json_is_accepted_and_read_back_exactly(
    storage: SessionStorage, text: str, document: Any
) -> None:
    """The database itself accepts whatever the codec hands it (Postgres refuses NUL in
    ``text`` and the ``\\u0000`` escape in ``jsonb``), and it reads back unchanged."""
    key = f"agent:prop:{abs(hash((text, repr(document))))}"
    node = await storage.get_session(key) or await new_session(storage, key)
    entry = TranscriptEntry(
        session_id=node.session_id,
        session_key=node.session_key,
        role="assistant",
        content=text,
        tool_calls=[{"arguments": document}],
        turn_context={"value": document},
    )
    written = await storage.append_transcript_entry(entry)
    read = await storage.get_transcript(node.session_id)
    assert read[-1] == written
    assert (read[-1].content, read[-1].tool_calls, read[-1].turn_context) == (
        text,
        [{"arguments": document}],
        {"value": document},
    )


async def test_transcript_text_and_json_round_trip(storage: SessionStorage) -> None:
    node = await new_session(storage, KEY)
    written: dict[str, TranscriptEntry] = {}
    for name, value in AWKWARD.items():
        entry = TranscriptEntry(
            session_id=node.session_id,
            session_key=KEY,
            role="assistant",
            content=value,
            reasoning_content=value,
            tool_calls=[_json_with(value), {"function": {"arguments": value}}],
            # Identifier-like fields refuse NUL (see the test below); the rest is free text.
            tool_call_id=value if "\x00" not in value else value.replace("\x00", ""),
            turn_usage=_json_with(value),
            turn_context={"value": value},
            provenance_source_tool=value if "\x00" not in value else None,
        )
        await storage.append_transcript_entry(entry)
        written[name] = entry
    read = await storage.get_transcript(node.session_id)
    assert {n: e for n, e in zip(AWKWARD, read, strict=True)} == written
    canonical = await storage.get_canonical_transcript(node.session_id)
    assert canonical == read


async def test_archive_rows_round_trip(storage: SessionStorage) -> None:
    node = await new_session(storage, KEY)
    rows = [
        archived(
            node,
            i,
            value,
            created_at=i,
            reasoning_content=value,
            tool_calls=[_json_with(value)],
            turn_usage=_json_with(value),
        )
        for i, value in enumerate(AWKWARD.values(), start=1)
    ]
    await insert_archive(storage, rows)
    read = await storage.get_compacted_transcript_entries(node.session_id)
    assert [(r.content, r.reasoning_content, r.tool_calls, r.turn_usage) for r in read] == [
        (r.content, r.reasoning_content, r.tool_calls, r.turn_usage) for r in rows
    ]
    canonical = await storage.get_canonical_transcript(node.session_id)
    assert [e.content for e in canonical] == list(AWKWARD.values())


async def test_summary_text_and_json_round_trip(storage: SessionStorage) -> None:
    node = await new_session(storage, KEY)
    written = []
    for value in AWKWARD.values():
        summary = SessionSummary(
            session_id=node.session_id,
            session_key=KEY,
            summary_text=value,
            summary_payload=_json_with(value),
            missing_obligations=[value],
            critical_carry_forward=[value, value],
            trigger_reason=value,
            compaction_id="cmp" + value,
        )
        written.append(await storage.save_summary(summary))
    assert await storage.get_all_summaries(node.session_id) == written


async def test_context_state_payload_round_trips(storage: SessionStorage) -> None:
    node = await new_session(storage, KEY)
    written = []
    for i, value in enumerate(AWKWARD.values()):
        state = SessionContextState(
            session_id=node.session_id,
            session_key=KEY,
            state_kind=value,
            provider=value,
            model=value,
            payload=_json_with(value),
            invalid_reason=value,
            created_at=i,
        )
        written.append(await storage.save_context_state(state))
    assert await storage.get_context_states(KEY) == written


async def test_session_fields_round_trip(storage: SessionStorage) -> None:
    for i, value in enumerate(AWKWARD.values()):
        node = SessionNode(
            session_key=f"agent:main:s{i}",
            label=value,
            display_name=value,
            subject=value,
            model=value,
            delivery_context=_json_with(value),
            origin={"from": value},
        )
        await storage.upsert_session(node)
        assert await storage.get_session(node.session_key) == node


async def test_one_megabyte_of_content(storage: SessionStorage) -> None:
    node = await new_session(storage, KEY)
    big = ("plain text, 中文, 🦑, \x00, \\0, " + MARKER) * 40_000
    assert len(big) >= 1_000_000
    entry = TranscriptEntry(
        session_id=node.session_id,
        session_key=KEY,
        role="user",
        content=big,
        tool_calls=[{"blob": big}],
    )
    await storage.append_transcript_entry(entry)
    [read] = await storage.get_transcript(node.session_id)
    assert read.content == big
    assert read.tool_calls == [{"blob": big}]


async def test_filters_compare_the_original_text(storage: SessionStorage) -> None:
    """Escaping is invisible to lookups too: filtering by a NUL-holding value finds it."""
    node = await new_session(storage, KEY)
    await storage.save_context_state(
        SessionContextState(
            session_id=node.session_id, session_key=KEY, state_kind="k\x00", provider="p\x00"
        )
    )
    await storage.save_context_state(
        SessionContextState(session_id=node.session_id, session_key=KEY, state_kind="k")
    )
    found = await storage.get_context_states(KEY, provider="p\x00", state_kind="k\x00")
    assert [s.state_kind for s in found] == ["k\x00"]
    await storage.save_summary(
        SessionSummary(
            session_id=node.session_id, session_key=KEY, summary_text="s", compaction_id="c\x00"
        )
    )
    changed = await storage.update_summary_flush_receipt_status_by_compaction(KEY, "c\x00", "safe")
    assert changed == 1


async def test_plain_text_is_stored_as_plain_text(storage: SessionStorage) -> None:
    """Only values that need it are escaped: SQL tools and old readers see ordinary text."""
    node = await new_session(storage, KEY)
    entry = TranscriptEntry(
        session_id=node.session_id, session_key=KEY, role="user", content="plain 🦑 \\0"
    )
    await storage.append_transcript_entry(entry)
    async with storage.engine.connect() as conn:
        raw = await conn.execute(
            sa.text("SELECT content FROM transcript_entries WHERE id = :id"), {"id": entry.id}
        )
        assert raw.scalar_one() == "plain 🦑 \\0"


# -- refusals ----------------------------------------------------------------------------


def _entry(node: SessionNode, **fields: Any) -> TranscriptEntry:
    fields.setdefault("role", "user")
    return TranscriptEntry(session_id=node.session_id, session_key=KEY, **fields)


REFUSED_ENTRIES: dict[str, dict[str, Any]] = {
    "surrogate_content": {"content": LONE_SURROGATE},
    "surrogate_reasoning": {"role": "assistant", "reasoning_content": LONE_SURROGATE},
    "surrogate_json_value": {"tool_calls": [{"name": LONE_SURROGATE}]},
    "surrogate_json_key": {"turn_usage": {LONE_SURROGATE: 1}},
    "object_in_tool_calls": {"tool_calls": [{"fn": object()}]},
    "set_in_turn_usage": {"turn_usage": {"s": {1, 2}}},
    "nan_in_turn_usage": {"turn_usage": {"cost": math.nan}},
    "infinity_in_tool_calls": {"tool_calls": [{"x": math.inf}]},
}


async def test_unstorable_transcript_values_are_refused(storage: SessionStorage) -> None:
    node = await new_session(storage, KEY)
    before = await table_snapshot(storage)
    for name, fields in REFUSED_ENTRIES.items():
        entry = _entry(node, **fields)
        with pytest.raises(InvalidInputError):
            await storage.append_transcript_entry(entry)
        assert entry.id is None, name
        with pytest.raises(InvalidInputError):
            await storage.append_transcript_entry(_entry(node, **fields), expected_epoch=0)
    assert await table_snapshot(storage) == before
    assert await storage.count_transcript_entries(node.session_id) == 0


async def test_unstorable_values_elsewhere_are_refused(storage: SessionStorage) -> None:
    node = await new_session(storage, KEY)
    before = await table_snapshot(storage)

    def summary(**fields: Any) -> SessionSummary:
        fields.setdefault("summary_text", "ok")
        return SessionSummary(session_id=node.session_id, session_key=KEY, **fields)

    def state(**fields: Any) -> SessionContextState:
        return SessionContextState(
            session_id=node.session_id, session_key=KEY, state_kind="k", **fields
        )

    attempts: list[Callable[[], Awaitable[object]]] = [
        lambda: storage.save_summary(summary(summary_text=LONE_SURROGATE)),
        lambda: storage.save_summary(summary(summary_payload={"x": LONE_SURROGATE})),
        lambda: storage.save_summary(summary(summary_payload={"x": math.nan})),
        lambda: storage.save_summary(summary(summary_payload={"x": object()})),
        lambda: storage.save_context_state(state(payload={LONE_SURROGATE: "v"})),
        lambda: storage.save_context_state(state(payload={"v": -math.inf})),
        lambda: storage.save_context_state(state(payload={"v": object()})),
        lambda: storage.upsert_session(node.model_copy(update={"label": LONE_SURROGATE})),
        lambda: storage.upsert_session(node.model_copy(update={"origin": {"o": object()}})),
        lambda: storage.upsert_session(
            node.model_copy(update={"delivery_context": {"c": math.nan}})
        ),
    ]
    for attempt in attempts:
        with pytest.raises(InvalidInputError):
            await attempt()
    assert await table_snapshot(storage) == before
    stored = await storage.get_session(KEY)
    assert stored == node


async def test_a_refused_write_leaves_the_store_usable(storage: SessionStorage) -> None:
    """A refusal rolls back its own transaction only; the next write goes through."""
    node = await new_session(storage, KEY)
    with pytest.raises(InvalidInputError):
        await storage.append_transcript_entry(_entry(node, content=LONE_SURROGATE))
    await storage.append_transcript_entry(_entry(node, content="fine"))
    assert [e.content for e in await storage.get_transcript(node.session_id)] == ["fine"]


@pytest.mark.parametrize("field", ["role", "tool_call_id", "message_id", "provenance_kind"])
async def test_nul_in_an_identifier_field_is_refused_before_anything_is_written(
    storage: SessionStorage, field: str
) -> None:
    """Identifier-like fields are plain text: NUL is refused on both backends alike."""
    node = await new_session(storage, KEY)
    values: dict[str, Any] = {"role": "user", field: "bad\x00value"}
    with pytest.raises(ValueError, match="NUL"):
        TranscriptEntry(session_id=node.session_id, session_key=KEY, **values)
    assert await storage.count_transcript_entries(node.session_id) == 0
