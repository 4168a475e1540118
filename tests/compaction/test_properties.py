"""Properties of compaction over generated transcripts.

Pure: whatever the sizes, window and profile, the cut never separates a tool call from its
results, the kept part is exactly a suffix of the input, and a protected tail survives.
Against the database (both backends): after any mix of appends and compactions the
canonical transcript is everything ever appended, and surviving live rows keep their ids.
"""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from opensquilla.session import SessionManager, SessionStorage
from opensquilla.session.compaction import (
    CompactionConfig,
    CompactionRequest,
    compact_entries,
)

_ids = itertools.count()


@st.composite
def turns(draw: st.DrawFn) -> list[dict[str, Any]]:
    """One well-formed turn: a user message, a tool exchange, or an assistant answer."""
    size = st.integers(min_value=1, max_value=300)
    kind = draw(st.sampled_from(["user", "tools", "answer"]))
    if kind == "user":
        return [{"role": "user", "content": "question", "token_count": draw(size)}]
    if kind == "answer":
        return [{"role": "assistant", "content": "answer", "token_count": draw(size)}]
    count = draw(st.integers(min_value=1, max_value=3))
    call_ids = [f"call_{next(_ids)}" for _ in range(count)]
    call = {
        "role": "assistant",
        "content": "using tools",
        "token_count": draw(size),
        "tool_calls": [{"id": cid, "type": "function"} for cid in call_ids],
    }
    results = [
        {"role": "tool", "content": f"output {cid}", "token_count": draw(size), "tool_call_id": cid}
        for cid in call_ids
    ]
    return [call, *results]


transcripts = st.lists(turns(), min_size=0, max_size=12).map(
    lambda groups: [entry for group in groups for entry in group]
)
configs = st.builds(
    CompactionConfig,
    safety_margin=st.sampled_from([1.0, 1.2]),
    compaction_profile=st.sampled_from(["conversation", "coding"]),
)


def _call_positions(entries: list[dict[str, Any]]) -> dict[str, int]:
    return {
        call["id"]: index
        for index, entry in enumerate(entries)
        for call in entry.get("tool_calls") or []
    }


@given(entries=transcripts, window=st.integers(min_value=1, max_value=4000), config=configs)
def test_cut_respects_tool_pairs_suffix_and_protected_tail(
    entries: list[dict[str, Any]], window: int, config: CompactionConfig
) -> None:
    """The three structural guarantees a compaction must keep, whatever the input."""
    result = compact_entries(CompactionRequest("s", entries, window, config))
    kept = result.kept_entries

    if result.removed_count == 0:
        assert kept == entries  # the caller's entries, every key kept
        assert result.summary == ""
        return

    cut = len(entries) - len(kept)
    assert result.removed_count + len(kept) == len(entries)
    assert result.removed_count == cut > 0
    assert kept == entries[cut:]
    assert result.summary

    calls = _call_positions(entries)
    for index, entry in enumerate(entries):
        if entry.get("tool_call_id"):
            call_index = calls[entry["tool_call_id"]]
            assert (call_index < cut) == (index < cut), "a tool call was cut from its result"

    if config.compaction_profile == "coding":
        assert len(kept) >= 12
        assert kept[-12:] == entries[-12:]
        assert result.quality_report["protected_tail_preserved"] is True


# -- against the database ----------------------------------------------------------------

operations = st.lists(
    st.one_of(
        st.tuples(st.just("append"), turns()),
        st.tuples(st.just("compact"), st.integers(min_value=20, max_value=1500)),
    ),
    min_size=1,
    max_size=10,
)
Snapshot = tuple[str, str, str | None, Any, int]


def _view(entry: Any) -> Snapshot:
    return (entry.message_id, entry.role, entry.content, entry.tool_calls, entry.created_at)


@settings(
    max_examples=10,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(seed=transcripts, ops=operations)
async def test_canonical_transcript_survives_any_compaction_sequence(
    database: str, seed: list[dict[str, Any]], ops: list[tuple[str, Any]]
) -> None:
    """Compaction only moves rows: nothing appended is ever lost or altered, and the rows
    that stay live keep the id they were appended with."""
    key = f"agent:prop:s{next(_ids)}"
    async with SessionStorage(database) as store:
        manager = SessionManager(store, inject_time_prefix=False)
        await manager.create(key)
        appended: list[Snapshot] = []
        ids: dict[str, int | None] = {}

        async def append(group: list[dict[str, Any]]) -> None:
            for item in group:
                entry = await manager.append_message(
                    key,
                    item["role"],
                    item["content"],
                    tool_calls=item.get("tool_calls"),
                    tool_call_id=item.get("tool_call_id"),
                    token_count=item["token_count"],
                )
                appended.append(_view(entry))
                ids[entry.message_id] = entry.id

        await append(seed)
        compactions = 0
        for op, arg in ops:
            if op == "append":
                await append(arg)
            else:
                result = await manager.compact_with_result(
                    key, arg, CompactionConfig(safety_margin=1.0)
                )
                compactions += result.removed_count > 0

            canonical = await manager.get_canonical_transcript(key)
            assert [_view(e) for e in canonical] == appended
            live = await manager.get_transcript(key)
            assert [_view(e) for e in live] == appended[len(appended) - len(live) :]
            assert all(e.id == ids[e.message_id] for e in live)

        node = await manager.get_session(key)
        assert node is not None and node.compaction_count == compactions
        assert len(await manager.get_summaries(key)) == compactions
