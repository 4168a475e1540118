"""The item mapping as a property (pure: no database): whatever JSON object an item is,
its entry keeps it whole in the metadata, reads back equal, and its fields are what the
store accepts (a role, text or nothing, calls and results paired by id)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from opensquilla.session.integrations.openai_agents.items import ITEM_KEY, to_item, to_message
from opensquilla.session.models import TranscriptEntry
from opensquilla.session.models.messages import check_messages

from .items_catalog import ITEMS

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=10,
)
KINDS = st.sampled_from(
    [None, "message", "function_call", "function_call_output", "reasoning", "web_search_call",
     "computer_call_output", "mcp_approval_response", "item_reference", "other"]
)  # fmt: skip


@st.composite
def items(draw: Any) -> dict[str, Any]:
    item: dict[str, Any] = draw(st.dictionaries(st.text(max_size=8), JSON, max_size=4))
    kind = draw(KINDS)
    if kind is not None:
        item["type"] = kind
    if draw(st.booleans()):
        item["role"] = draw(st.sampled_from(["user", "assistant", "system", "developer"]))
    for name in ("content", "output", "call_id", "summary", "name", "arguments"):
        if draw(st.booleans()):
            item[name] = draw(JSON)
    return item


def _entry(item: dict[str, Any]) -> TranscriptEntry:
    [checked] = check_messages([to_message(item)])  # what append_messages would accept
    values = {
        k: v
        for k, v in checked.values.items()
        if v is not None and k in TranscriptEntry.model_fields
    }
    return TranscriptEntry(session_id="s", session_key="k", **values)


@settings(max_examples=60)
@given(items())
def test_any_item_round_trips_through_its_entry(item: dict[str, Any]) -> None:
    try:
        entry = _entry(item)
    except Exception as exc:  # only a value JSON text cannot hold may be refused
        assert "surrogate" in str(exc) or "\x00" in repr(item) or "JSON" in str(exc), exc
        return
    assert entry.metadata == {ITEM_KEY: item}
    assert to_item(entry) == item


def test_the_catalog_maps_calls_onto_results() -> None:
    entries = [_entry(item) for item in ITEMS]
    calls = {c["id"] for e in entries for c in e.tool_calls or [] if e.role == "assistant"}
    results = {e.tool_call_id for e in entries if e.role == "tool"}
    assert {"call_1", "call_3", "call_4", "call_6", "call_7", "ma_1"} <= calls
    assert results - {"call_2"} <= calls | {"ls_1", "call_5"}
    assert all(to_item(e) == item for e, item in zip(entries, ITEMS, strict=True))
