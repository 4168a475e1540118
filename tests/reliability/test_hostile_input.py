"""Hostile and odd input through the manager API, on the backend the run selects.

Everything is either stored and read back exactly (through every path a value travels:
the live transcript, a fork, the compacted archive, the reset archive file) or refused
with a package error before a single row changes. The storage-level round trips are in
``tests/storage/test_values.py``; this module goes through the use cases.
"""

from __future__ import annotations

import json
import math
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from opensquilla.session import SessionManager, SessionStorage
from opensquilla.session.errors import (
    InvalidInputError,
    InvalidSessionKeyError,
    SessionStoreError,
)
from opensquilla.session.models import SessionContextState, SessionIntent
from tests.helpers import table_snapshot

from .support import archive_documents

KEY = "agent:main:hostile"
RESET = SessionIntent.RESET_SAME_KEY

AWKWARD: dict[str, str] = {
    "nul": "before\x00after\x00",
    "emoji": "🦑 squid 👩‍👩‍👧 family 🏳️‍🌈 flag",
    "right_to_left": "مرحبا بالعالم שלום עולם \u202eevil\u202c \u200f",
    "combining": "e\u0301 vs \u00e9, Å vs A\u030a",
    "quotes": 'it\'s "quoted" `ticked` ‘curly’',
    "sql": "x'); DROP TABLE sessions; -- /* */ %_",
    "backslashes": "C:\\temp\\0\\\\new\\n\\u0000",
    "marker_lookalike": "\ufdd0looks like the escape marker\ufdd0",
    "controls": "\x01\x07\x1b[31mred\x7f\t\r\n",
}


def _tool_calls(value: str) -> list[dict[str, Any]]:
    arguments = {"text": [value, {value: 1}]}
    return [{"id": "call_1", value: value, "function": {"arguments": arguments}}]


def _entry_values(entry: Any) -> tuple[Any, ...]:
    def get(name: str) -> Any:
        return entry[name] if isinstance(entry, dict) else getattr(entry, name)

    return tuple(
        get(name)
        for name in (
            "role",
            "content",
            "tool_calls",
            "reasoning_content",
            "turn_usage",
            "turn_context",
            "token_count",
        )
    )


async def _refused_without_a_write(
    storage: SessionStorage,
    call: Callable[[], Awaitable[Any]],
    error: type[BaseException] = InvalidInputError,
) -> BaseException:
    """``call`` raises ``error`` (a package error and a ``ValueError``) and no table
    changes."""
    before = await table_snapshot(storage)
    with pytest.raises(error) as caught:
        await call()
    assert isinstance(caught.value, SessionStoreError), repr(caught.value)
    assert isinstance(caught.value, ValueError), repr(caught.value)
    assert await table_snapshot(storage) == before
    return caught.value


# -- text that must come back exactly ------------------------------------------------------


async def test_awkward_text_survives_every_path_through_the_manager(
    manager: SessionManager, storage: SessionStorage, _archive_dir: Path
) -> None:
    """NUL, emoji, right-to-left, combining marks, quotes, SQL and backslashes, in content
    and in every JSON field: identical in the live transcript, in a full fork, in the
    compacted archive, in a summary, in a context state and in the reset archive file."""
    await manager.create(KEY, label=AWKWARD["nul"], delivery_context={"to": AWKWARD["sql"]})
    written = []
    for value in AWKWARD.values():
        written.append(
            await manager.append_message(
                KEY,
                "assistant",
                value,
                tool_calls=_tool_calls(value),
                reasoning_content=value,
                turn_usage={"note": value, value: 1},
                turn_context={"context": [value]},
                token_count=120,
            )
        )
    expected = [_entry_values(entry) for entry in written]

    assert [_entry_values(e) for e in await manager.get_transcript(KEY)] == expected
    node = await manager.get_session(KEY)
    assert node is not None
    assert node.label == AWKWARD["nul"] and node.delivery_context == {"to": AWKWARD["sql"]}

    await manager.branch(KEY, "agent:main:hostile-fork", fork_transcript=True)
    fork = await manager.get_transcript("agent:main:hostile-fork")
    assert [_entry_values(e) for e in fork] == expected

    result = await manager.compact_with_result(KEY, 600)
    assert result.removed_count > 0
    assert len(await manager.get_transcript(KEY)) < len(written)
    canonical = await manager.get_canonical_transcript(KEY)
    assert [_entry_values(e) for e in canonical] == expected

    for value in AWKWARD.values():
        await manager.save_context_state(
            SessionContextState(
                session_id=node.session_id,
                session_key=KEY,
                state_kind="awkward",
                payload={value: [value, {"nested": value}]},
            )
        )
    states = await manager.get_context_states(KEY, state_kind="awkward")
    assert [s.payload for s in states] == [
        {value: [value, {"nested": value}]} for value in AWKWARD.values()
    ]

    for value in ("tail one " + AWKWARD["nul"], "tail two " + AWKWARD["emoji"]):
        written.append(await manager.append_message(KEY, "user", value, token_count=1))
    expected = [_entry_values(entry) for entry in written]
    summary_text = "summary: " + " | ".join(AWKWARD.values())
    kept = [{"role": "user", "content": written[-1].content}]
    assert await manager.persist_compaction_result(KEY, summary_text, kept)
    assert (await manager.get_summaries(KEY))[-1].summary_text == summary_text
    assert [_entry_values(e) for e in await manager.get_canonical_transcript(KEY)] == expected

    await manager.apply_intent(KEY, RESET)
    (document,) = archive_documents(_archive_dir)
    assert [_entry_values(e) for e in document["transcript_entries"]] == expected
    assert document["summaries"][-1]["summary_text"] == summary_text
    assert document["session"]["label"] == AWKWARD["nul"]


async def test_ten_megabytes_of_content_round_trip(
    storage: SessionStorage, _archive_dir: Path
) -> None:
    """A 10 MiB message (multi-byte characters and NUL included) is stored, read, forked,
    compacted away and archived whole; the memory-sync hook gets its exact UTF-8 size."""
    sizes: list[int] = []
    manager = SessionManager(storage, sizes.append, inject_time_prefix=False)
    unit = "0123456789abcdef🦑مرحبا\x00"
    huge = unit * (10 * 1024 * 1024 // len(unit.encode("utf-8")) + 1)
    assert 10 * 1024 * 1024 <= len(huge.encode("utf-8")) < 11 * 1024 * 1024
    await manager.create(KEY)

    entry = await manager.append_message(KEY, "user", huge, token_count=10)
    await manager.append_message(KEY, "assistant", "short answer", token_count=1)

    assert sizes[0] == len(huge.encode("utf-8"))
    (stored, _) = await manager.get_transcript(KEY)
    assert stored.id == entry.id and stored.content == huge
    await manager.branch(KEY, "agent:main:huge-fork", fork_transcript=True)
    assert (await manager.get_transcript("agent:main:huge-fork"))[0].content == huge
    assert await manager.persist_compaction_result(
        KEY, "the user pasted a very long text", [{"role": "assistant", "content": "short answer"}]
    )
    canonical = await manager.get_canonical_transcript(KEY)
    assert [e.content for e in canonical] == [huge, "short answer"]
    await manager.apply_intent(KEY, RESET)
    (document,) = archive_documents(_archive_dir)
    assert document["transcript_entries"][0]["content"] == huge


def _nested(depth: int) -> dict[str, Any]:
    """A JSON document ``depth`` containers deep, objects and arrays alternating."""
    value: Any = "leaf"
    for level in range(depth - 1):
        value = {f"level{level}": value} if level % 2 else [value]
    return {"top": value}


async def test_deeply_nested_json_that_is_stored_is_also_archived(
    manager: SessionManager, _archive_dir: Path
) -> None:
    """200 levels is ordinary and 900 is close to what the store accepts: both read back
    the same from the transcript, a fork, the compacted archive and the reset archive
    file. A value the store accepts must never make a reset lose its history."""
    shallow, deep = _nested(200), _nested(900)
    await manager.create(KEY)
    await manager.append_message(KEY, "assistant", "one", tool_calls=[shallow], token_count=300)
    await manager.append_message(KEY, "assistant", "two", turn_usage=deep, token_count=300)
    await manager.append_message(KEY, "user", "three", turn_context=deep, token_count=300)
    await manager.append_message(KEY, "user", "four", token_count=1)

    def payloads(entries: list[Any]) -> list[Any]:
        return [
            (_entry_values(e)[2], _entry_values(e)[4], _entry_values(e)[5]) for e in entries[:3]
        ]

    expected = [([shallow], None, None), (None, deep, None), (None, None, deep)]
    assert payloads(await manager.get_transcript(KEY)) == expected
    await manager.branch(KEY, "agent:main:deep-fork", fork_transcript=True)
    assert payloads(await manager.get_transcript("agent:main:deep-fork")) == expected
    assert (await manager.compact_with_result(KEY, 400)).removed_count > 0
    assert payloads(await manager.get_canonical_transcript(KEY)) == expected

    report = await manager.reset_with_report(KEY)

    assert report.archive_path is not None, "the reset archive was not written"
    (document,) = archive_documents(_archive_dir)
    assert payloads(document["transcript_entries"]) == expected


async def test_json_nested_beyond_the_limit_is_refused_before_anything_is_written(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """5000 levels cannot be encoded: a clear package error, and no table changes, from
    every field that takes JSON."""
    node = await manager.create(KEY)
    too_deep = _nested(5000)

    calls: list[Callable[[], Awaitable[Any]]] = [
        lambda: manager.append_message(KEY, "assistant", "x", tool_calls=[too_deep]),
        lambda: manager.append_message(KEY, "assistant", "x", turn_usage=too_deep),
        lambda: manager.append_message(KEY, "user", "x", turn_context=too_deep),
        lambda: manager.update(KEY, delivery_context=too_deep),
        lambda: manager.create("agent:main:deep-new", origin=too_deep),
        lambda: manager.save_context_state(
            SessionContextState(
                session_id=node.session_id, session_key=KEY, state_kind="s", payload=too_deep
            )
        ),
    ]
    for call in calls:
        error = await _refused_without_a_write(storage, call)
        assert "nested too deeply" in str(error)
    assert await manager.get_transcript(KEY) == []


LONE = "\ud800"


async def test_lone_surrogates_are_refused_before_anything_is_written(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """An unpaired surrogate cannot be encoded as UTF-8 on either backend: every field that
    could carry one refuses it with a package error, and nothing (not even the session
    touch of an append) is written."""
    node = await manager.create(KEY)
    await manager.append_message(KEY, "user", "existing", token_count=1)
    await manager.append_message(KEY, "assistant", "existing too", token_count=1)

    calls: list[Callable[[], Awaitable[Any]]] = [
        lambda: manager.append_message(KEY, "user", f"text {LONE} text", token_count=5),
        lambda: manager.append_message(KEY, "assistant", "x", tool_calls=[{"id": LONE}]),
        lambda: manager.append_message(KEY, "assistant", "x", tool_calls=[{LONE: "key"}]),
        lambda: manager.append_message(KEY, "assistant", "x", turn_usage={"u": [LONE]}),
        lambda: manager.append_message(KEY, "user", "x", turn_context={"c": LONE}),
        lambda: manager.append_message(KEY, "assistant", "x", reasoning_content=LONE),
        lambda: manager.append_message(KEY, "user", "x", provenance={"source_tool": LONE}),
        lambda: manager.create("agent:main:new", label=LONE),
        lambda: manager.update(KEY, label=f"a{LONE}"),
        lambda: manager.update(KEY, delivery_context={"to": LONE}),
        lambda: manager.save_context_state(
            SessionContextState(
                session_id=node.session_id, session_key=KEY, state_kind="s", payload={"p": LONE}
            )
        ),
        lambda: manager.persist_compaction_result(
            KEY, f"summary {LONE}", [{"role": "assistant", "content": "existing too"}]
        ),
    ]
    for call in calls:
        await _refused_without_a_write(storage, call)
    for key_call in (
        lambda: manager.create(f"agent:main:{LONE}"),
        lambda: manager.append_message(f"agent:main:{LONE}", "user", "x"),
    ):
        await _refused_without_a_write(storage, key_call, InvalidSessionKeyError)


# -- keys ----------------------------------------------------------------------------------

# Pairs where a pattern-matching filter (LIKE, GLOB, regex) would confuse one with the other.
HOSTILE_KEYS = (
    "agent:main:o'brien",
    'agent:main:"quoted"',
    "agent:main:100%",
    "agent:main:100%x",
    "agent:main:100",
    "agent:main:a_b",
    "agent:main:aXb",
    "agent:main:back\\slash",
    "agent:main:back\\\\slash",
    "agent:main:x'); DROP TABLE sessions; --",
    "agent:main:*",
    "agent:main:?",
    "agent:main:[ab]",
    "agent:main:a",
    "agent:main:%",
    "agent:main:_",
    "agent:main:🦑 שלום",
)


async def test_hostile_keys_are_stored_literally_and_filters_match_exactly(
    manager: SessionManager, storage: SessionStorage
) -> None:
    for key in HOSTILE_KEYS:
        await manager.create(key)
        await manager.append_message(key, "user", f"in {key}")
        await manager.branch(key, f"{key}/child", fork_transcript=True)

    assert await storage.count_sessions() == 2 * len(HOSTILE_KEYS)
    for key in HOSTILE_KEYS:
        node = await manager.get_session(key)
        assert node is not None and node.session_key == key
        assert [e.content for e in await manager.get_transcript(key)] == [f"in {key}"]
        assert [e.content for e in await manager.get_transcript(f"{key}/child")] == [f"in {key}"]
        children = await storage.list_sessions(spawned_by=key)
        assert [c.session_key for c in children] == [f"{key}/child"], key
        by_parent = await storage.list_sessions(parent_session_key=key)
        assert [c.session_key for c in by_parent] == [f"{key}/child"], key


async def test_repair_queue_agent_filter_is_an_exact_prefix(
    manager: SessionManager,
) -> None:
    """``_`` and ``%`` are not wildcards and case matters: the queue of agent ``a_b``
    holds only keys that start with ``agent:a_b:``."""
    keys = {
        "agent:a_b:one": "a_b",
        "agent:axb:one": "axb",
        "agent:a-b:one": "a-b",
        "AGENT:a_b:upper": None,  # not canonical (no "agent:" prefix), so no agent
        "agent:a_b": None,  # no trailing colon: not a session of agent a_b
        "agent:a_bc:one": "a_bc",
    }
    for key in keys:
        await manager.create(key)
        await manager.append_message(key, "user", "old", token_count=1)
        await manager.append_message(key, "assistant", "kept", token_count=1)
        assert await manager.persist_compaction_result(
            key,
            f"summary of {key}",
            [{"role": "assistant", "content": "kept"}],
            flush_receipt_status="degraded_forensic",
        )

    async def queue(agent_id: str) -> list[str]:
        return [s.session_key for s in await manager.list_degraded_compactions(agent_id=agent_id)]

    assert await queue("a_b") == ["agent:a_b:one"]
    assert await queue("A_B") == ["agent:a_b:one"]
    assert await queue("axb") == ["agent:axb:one"]
    assert await queue("a%b") == ["agent:a-b:one"]  # normalised to a-b, matched literally
    assert await queue("a_bc") == ["agent:a_bc:one"]
    assert len(await manager.list_degraded_compactions()) == len(keys)


async def test_over_long_keys_are_refused_everywhere_and_the_limit_is_usable(
    manager: SessionManager, storage: SessionStorage
) -> None:
    await manager.create(KEY)
    await manager.append_message(KEY, "user", "hello")
    too_long = "agent:main:" + "k" * 502  # 513 characters
    assert len(too_long) == 513
    calls: list[Callable[[], Awaitable[Any]]] = [
        lambda: manager.create(too_long),
        lambda: manager.get_or_create(too_long),
        lambda: manager.apply_intent(too_long, RESET),
        lambda: manager.append_message(too_long, "user", "x"),
        lambda: manager.branch(KEY, too_long, fork_transcript=True),
        lambda: manager.branch(too_long, "agent:main:child"),
        lambda: manager.update(too_long, label="x"),
        lambda: manager.finish(too_long),
        lambda: manager.truncate(too_long, 1),
        lambda: manager.get_transcript(too_long),
        lambda: manager.compact_with_result(too_long, 100),
        lambda: manager.persist_compaction_result(too_long, "s", []),
        lambda: storage.list_sessions(spawned_by=too_long),
        lambda: manager.get_context_states(too_long),
    ]
    for call in calls:
        await _refused_without_a_write(storage, call, InvalidSessionKeyError)

    longest = "agent:main:" + "🦑" * 501  # 512 characters, 2015 bytes of UTF-8
    assert len(longest) == 512
    await manager.create(longest)
    await manager.append_message(longest, "user", "at the limit")
    child = "agent:main:" + "c" * 501
    await manager.branch(longest, child, fork_transcript=True)
    assert [e.content for e in await manager.get_transcript(child)] == ["at the limit"]
    node = await manager.get_session(child)
    assert node is not None and node.parent_session_key == longest


# -- values that are not JSON, enums that do not exist, limits below zero ------------------


async def test_values_that_are_not_json_are_refused_before_anything_is_written(
    manager: SessionManager, storage: SessionStorage
) -> None:
    node = await manager.create(KEY)
    bad_values: list[Any] = [
        object(),
        {1, 2},
        b"bytes",
        Decimal("1.5"),
        datetime.now(tz=UTC),
        math.nan,
        math.inf,
        -math.inf,
    ]
    for bad in bad_values:
        calls: list[Callable[[], Awaitable[Any]]] = [
            lambda bad=bad: manager.append_message(KEY, "assistant", "x", tool_calls=[{"a": bad}]),
            lambda bad=bad: manager.append_message(KEY, "assistant", "x", turn_usage={"a": bad}),
            lambda bad=bad: manager.append_message(KEY, "user", "x", turn_context={"a": [bad]}),
            lambda bad=bad: manager.update(KEY, delivery_context={"a": bad}),
            lambda bad=bad: manager.create("agent:main:new", origin={"a": bad}),
            lambda bad=bad: manager.save_context_state(
                SessionContextState(
                    session_id=node.session_id, session_key=KEY, state_kind="s", payload={"a": bad}
                )
            ),
        ]
        for call in calls:
            await _refused_without_a_write(storage, call)


async def test_an_unknown_intent_is_refused_as_a_store_error(
    manager: SessionManager, storage: SessionStorage
) -> None:
    await manager.create(KEY)
    for intent in ("bogus", "RESET", "", "reset-same-key"):
        error = await _refused_without_a_write(
            storage, lambda intent=intent: manager.apply_intent(KEY, intent), InvalidInputError
        )
        assert repr(intent) in str(error) or intent in str(error)
    await _refused_without_a_write(
        storage, lambda: manager.apply_intent("agent:main:fresh", "bogus"), InvalidInputError
    )


async def test_an_unknown_status_is_refused_everywhere(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """``SessionStatus`` has five values; no use case may store a sixth."""
    await manager.create(KEY)
    calls: dict[str, Callable[[], Awaitable[Any]]] = {
        "finish": lambda: manager.finish(KEY, "bogus"),
        "branch": lambda: manager.branch(KEY, "agent:main:child", status="bogus"),
        "create": lambda: manager.create("agent:main:new", status="bogus"),
        "get_or_create": lambda: manager.get_or_create("agent:main:new", status="bogus"),
        "apply_intent": lambda: manager.apply_intent("agent:main:new", RESET, status="bogus"),
        "update": lambda: manager.update(KEY, status="bogus"),
    }
    failures = []
    for name, call in calls.items():
        try:
            await _refused_without_a_write(storage, call, InvalidInputError)
        except BaseException as exc:  # collect every offender, not only the first
            failures.append(f"{name}: {type(exc).__name__}: {str(exc).splitlines()[0][:120]}")
    assert failures == [], "\n".join(failures)


async def test_negative_and_non_integer_limits_are_refused(
    manager: SessionManager, storage: SessionStorage
) -> None:
    await manager.create(KEY)
    for n in range(3):
        await manager.append_message(KEY, "user", f"m{n}", token_count=1)
    calls: list[Callable[[], Awaitable[Any]]] = [
        lambda: manager.get_transcript(KEY, limit=-1),
        lambda: manager.get_transcript(KEY, offset=-1),
        lambda: manager.get_transcript(KEY, limit="2"),  # type: ignore[arg-type]
        lambda: manager.get_canonical_transcript(KEY, limit=-5),
        lambda: manager.get_canonical_transcript(KEY, offset=1.5),  # type: ignore[arg-type]
        lambda: storage.list_sessions(limit=-1),
        lambda: storage.list_sessions(offset=-1),
        lambda: manager.list_degraded_compactions(limit=-1),
        lambda: manager.truncate(KEY, -1),
        lambda: manager.cap_entries(-1),
        lambda: manager.prune_stale(-1),
        lambda: manager.branch(KEY, "agent:main:c", fork_transcript=True, max_fork_tokens=-1),
        lambda: manager.preview_truncate(KEY, -1),
        lambda: manager.preview_cap_entries(-1),
        lambda: manager.preview_prune_stale(-1),
        lambda: manager.append_message(KEY, "user", "x", token_count=-3),
    ]
    for call in calls:
        await _refused_without_a_write(storage, call)
    assert [e.content for e in await manager.get_transcript(KEY, limit=0)] == []
    assert [e.content for e in await manager.get_transcript(KEY, offset=5)] == []


async def test_a_compaction_window_that_is_not_a_count_changes_nothing(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """A negative or zero window compacts nothing (the summary could never fit); a window
    that is not a number is refused with a package error, not a ``TypeError`` from deep
    inside the planner."""
    await manager.create(KEY)
    for n in range(8):
        await manager.append_message(KEY, "user", f"message {n} " * 30, token_count=100)
    before = await table_snapshot(storage)
    for window in (-5, 0):
        result = await manager.compact_with_result(KEY, window)
        assert result.removed_count == 0 and result.skip_reason is not None
    assert await table_snapshot(storage) == before
    for window in ("1000", None, [1000]):
        await _refused_without_a_write(
            storage,
            lambda window=window: manager.compact_with_result(KEY, window),  # type: ignore[arg-type]
        )


def test_archive_documents_helper_ignores_temporary_files(tmp_path: Path) -> None:
    """The helper every archive check uses must not count a half-written temporary file."""
    (tmp_path / ".x.json.123.tmp").write_text("{", encoding="utf-8")
    (tmp_path / "1-k-s.json").write_text(json.dumps({"a": 1}), encoding="utf-8")
    assert archive_documents(tmp_path) == [{"a": 1}]
