"""Session intents: continue, new chat and the same-key reset, with its archive file."""

from __future__ import annotations

import json
import logging
import os
import re
import stat
from pathlib import Path

import pytest

from opensquilla.session import SessionManager, SessionStorage
from opensquilla.session.models import (
    CompactedTranscriptEntry,
    SessionContextState,
    SessionIntent,
    SessionNode,
    SessionStatus,
    SessionSummary,
    TranscriptEntry,
)
from opensquilla.session.storage import StaleEpochError
from tests.helpers import table_snapshot

KEY = "agent:main:chat"
RESET = SessionIntent.RESET_SAME_KEY

# Everything SEMANTICS §7.1 step 6 zeroes, with a non-default value to start from.
COUNTERS: dict[str, object] = {
    "input_tokens": 11,
    "output_tokens": 22,
    "total_tokens": 333,
    "total_tokens_fresh": True,
    "estimated_cost_usd": 0.5,
    "total_cost_usd": 0.75,
    "billed_cost_usd": 0.25,
    "estimated_cost_component_usd": 0.125,
    "cost_source": "mixed",
    "missing_cost_entries": 4,
    "cache_read": 5,
    "cache_write": 6,
    "context_tokens": 8_000,
    "compaction_count": 2,
}
ZEROED: dict[str, object] = {
    "input_tokens": 0,
    "output_tokens": 0,
    "total_tokens": 0,
    "total_tokens_fresh": False,
    "estimated_cost_usd": 0.0,
    "total_cost_usd": 0.0,
    "billed_cost_usd": 0.0,
    "estimated_cost_component_usd": 0.0,
    "cost_source": "none",
    "missing_cost_entries": 0,
    "cache_read": 0,
    "cache_write": 0,
    "context_tokens": None,
    "compaction_count": 0,
}


def _archives(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.json")) if directory.exists() else []


async def _with_counters(storage: SessionStorage, key: str) -> SessionNode:
    node = await storage.get_session(key)
    assert node is not None
    for name, value in COUNTERS.items():
        setattr(node, name, value)
    await storage.upsert_session(node)
    return node


# -- continue and new chat -----------------------------------------------------------------


async def test_continue_keeps_identity_and_transcript(manager: SessionManager) -> None:
    node = await manager.create(KEY)
    await manager.append_message(KEY, "user", "still here")

    applied, created = await manager.apply_intent(KEY, SessionIntent.CONTINUE)

    assert created is False
    assert applied.session_id == node.session_id
    assert applied.epoch == node.epoch
    assert [e.content for e in await manager.get_transcript(KEY)] == ["still here"]


async def test_new_chat_on_a_taken_key_conflicts(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """A new conversation may not silently reuse a live key; nothing changes."""
    await manager.create(KEY)
    await manager.append_message(KEY, "user", "existing")
    before = await table_snapshot(storage)

    with pytest.raises(ValueError, match="session_key conflict"):
        await manager.apply_intent(KEY, SessionIntent.NEW_CHAT)

    assert await table_snapshot(storage) == before


@pytest.mark.parametrize("intent", list(SessionIntent))
async def test_any_intent_creates_a_missing_key(
    manager: SessionManager, intent: SessionIntent
) -> None:
    """Whatever was asked, a missing key ends up created, with the creation fields."""
    applied, created = await manager.apply_intent(
        "agent:Main:fresh", intent, agent_id="helper", model="gpt-x"
    )

    assert created is True
    assert applied.session_key == "agent:main:fresh"
    assert applied.agent_id == "helper"
    assert applied.model == "gpt-x"
    assert applied.epoch == 0
    stored = await manager.get_session("agent:main:fresh")
    assert stored is not None and stored.session_id == applied.session_id


async def test_intent_may_be_given_as_its_string_value(manager: SessionManager) -> None:
    node = await manager.create(KEY)

    applied, rotated = await manager.apply_intent(KEY, "reset_same_key")

    assert rotated is True
    assert applied.session_id != node.session_id


async def test_unknown_intent_is_refused_before_anything_happens(
    manager: SessionManager,
) -> None:
    with pytest.raises(ValueError):
        await manager.apply_intent("agent:main:never", "start_over")

    assert await manager.get_session("agent:main:never") is None


# -- reset: the database side --------------------------------------------------------------


async def test_reset_starts_a_new_generation(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """A reset rotates identity, bumps the epoch, zeroes the counters and removes the old
    generation's history, while the key's settings survive."""
    original = await manager.create(
        KEY, model="m-1", model_provider="prov", channel="slack", label="desk"
    )
    await manager.finish(KEY, status=SessionStatus.FAILED)
    await _with_counters(storage, KEY)
    await manager.append_message(KEY, "user", "before the reset")
    await storage.save_summary(
        SessionSummary(session_id=original.session_id, session_key=KEY, summary_text="gist")
    )
    await manager.save_context_state(
        SessionContextState(
            session_id=original.session_id,
            session_key=KEY,
            state_kind="structured_summary_v1",
            payload={"goal": "old"},
        )
    )
    before = await storage.get_session(KEY)
    assert before is not None

    applied, rotated = await manager.apply_intent(KEY, RESET)

    assert rotated is True
    assert applied.session_key == KEY
    assert applied.session_id != original.session_id
    assert applied.epoch == before.epoch + 1
    for name, value in ZEROED.items():
        assert getattr(applied, name) == value, name
    assert applied.created_at == before.created_at
    assert applied.started_at == before.started_at
    assert applied.status == "failed"
    assert (applied.model, applied.model_provider, applied.channel, applied.label) == (
        "m-1",
        "prov",
        "slack",
        "desk",
    )
    assert applied.updated_at >= before.updated_at
    stored = await storage.get_session(KEY)
    assert stored is not None
    assert stored.model_dump() == applied.model_dump()
    assert manager.get_cached_epoch(KEY) == applied.epoch

    assert await storage.count_transcript_entries(original.session_id) == 0
    assert await storage.count_transcript_entries(applied.session_id) == 0
    assert await storage.get_all_summaries(original.session_id) == []
    assert await manager.get_summaries(KEY) == []


async def test_reset_invalidates_context_states_but_keeps_them(
    manager: SessionManager,
) -> None:
    node = await manager.create(KEY)
    for kind in ("structured_summary_v1", "anthropic_compaction"):
        await manager.save_context_state(
            SessionContextState(session_id=node.session_id, session_key=KEY, state_kind=kind)
        )

    await manager.apply_intent(KEY, RESET)

    assert await manager.get_context_states(KEY) == []
    remaining = await manager.get_context_states(KEY, valid_only=False)
    assert len(remaining) == 2
    assert all(s.valid is False and s.invalid_reason == "session_reset" for s in remaining)


async def test_reset_removes_the_compacted_archive(
    manager: SessionManager, storage: SessionStorage
) -> None:
    node = await manager.create(KEY)
    await _insert_archive(storage, node, ["old one"])

    await manager.apply_intent(KEY, RESET)

    assert await storage.get_compacted_transcript_entries(node.session_id) == []


async def test_reset_leaves_other_sessions_alone(manager: SessionManager) -> None:
    other = await manager.create("agent:main:other")
    await manager.append_message("agent:main:other", "user", "unrelated")
    await manager.create(KEY)
    await manager.append_message(KEY, "user", "doomed")

    await manager.apply_intent(KEY, RESET)

    stored = await manager.get_session("agent:main:other")
    assert stored is not None and stored.session_id == other.session_id
    assert [e.content for e in await manager.get_transcript("agent:main:other")] == ["unrelated"]


async def test_reset_fences_writers_of_the_old_epoch(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """A writer that read the session before the reset cannot land in either generation."""
    node = await manager.create(KEY)
    old_epoch = await storage.get_epoch(KEY)

    applied, _ = await manager.apply_intent(KEY, RESET)

    assert await storage.get_epoch(KEY) > old_epoch
    with pytest.raises(StaleEpochError):
        await storage.append_transcript_entry(
            TranscriptEntry(
                session_id=node.session_id, session_key=KEY, role="user", content="late"
            ),
            expected_epoch=old_epoch,
        )
    stored = await storage.get_session(KEY)
    assert stored is not None and stored.session_id == applied.session_id
    assert await manager.get_transcript(KEY) == []
    assert await storage.count_transcript_entries(node.session_id) == 0


async def test_appends_after_reset_go_to_the_new_generation(manager: SessionManager) -> None:
    await manager.create(KEY)
    await manager.append_message(KEY, "user", "old")

    applied, _ = await manager.apply_intent(KEY, RESET)
    entry = await manager.append_message(KEY, "user", "new", token_count=4)

    assert entry.session_id == applied.session_id
    assert [e.content for e in await manager.get_transcript(KEY)] == ["new"]
    stored = await manager.get_session(KEY)
    assert stored is not None and stored.total_tokens == 4


async def test_successive_resets_keep_raising_the_epoch(manager: SessionManager) -> None:
    await manager.create(KEY)
    ids = set()
    for expected in (1, 2, 3):
        applied, _ = await manager.apply_intent(KEY, RESET)
        assert applied.epoch == expected
        ids.add(applied.session_id)
    assert len(ids) == 3


# -- reset: the archive file ---------------------------------------------------------------


async def _insert_archive(storage: SessionStorage, node: SessionNode, contents: list[str]) -> None:
    """Compacted-archive rows as a compaction would leave them (older than live rows)."""
    rows = [
        CompactedTranscriptEntry(
            session_id=node.session_id,
            session_key=node.session_key,
            compaction_id="cmp_direct",
            compaction_index=0,
            original_entry_id=index + 1,
            role="user",
            content=content,
            created_at=1_000 + index,
            token_count=5,
        )
        for index, content in enumerate(contents)
    ]
    async with storage.uow.write() as tx:
        await tx.transcript.insert_archive_rows(rows)


async def test_reset_archive_document(
    manager: SessionManager, storage: SessionStorage, _archive_dir: Path
) -> None:
    """One JSON file with the old generation, keys in the documented order."""
    node = await manager.create(KEY)
    await manager.append_message(KEY, "user", "hello")
    await manager.append_message(KEY, "assistant", "héllo back")
    await storage.save_summary(
        SessionSummary(
            session_id=node.session_id,
            session_key=KEY,
            summary_text="greetings",
            compaction_id="cmp_greet",
        )
    )

    applied, _ = await manager.apply_intent(KEY, RESET)

    (path,) = _archives(_archive_dir)
    assert re.fullmatch(rf"\d+-agent-main-chat-{node.session_id}.*\.json", path.name), path.name
    raw = path.read_text(encoding="utf-8")
    assert "héllo back" in raw  # not ASCII-escaped
    document = json.loads(raw)
    assert list(document) == [
        "schema_version",
        "archived_at",
        "reason",
        "session_key",
        "session_id",
        "session",
        "transcript_entries",
        "summaries",
    ]
    assert document["schema_version"] == 1
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z", document["archived_at"])
    assert document["reason"] == "reset_same_key"
    assert document["session_key"] == KEY
    assert document["session_id"] == node.session_id
    assert document["session"]["session_id"] == node.session_id
    assert document["session"]["epoch"] == applied.epoch
    assert [e["content"] for e in document["transcript_entries"]] == ["hello", "héllo back"]
    assert [s["summary_text"] for s in document["summaries"]] == ["greetings"]
    assert document["summaries"][0]["compaction_id"] == "cmp_greet"


async def test_reset_archive_holds_the_canonical_transcript(
    manager: SessionManager, storage: SessionStorage, _archive_dir: Path
) -> None:
    """Compacted-away rows are history too: the archive has them before the live tail."""
    node = await manager.create(KEY)
    await _insert_archive(storage, node, ["first, compacted", "second, compacted"])
    await manager.append_message(KEY, "assistant", "live tail")
    canonical = [e.content for e in await manager.get_canonical_transcript(KEY)]
    assert canonical == ["first, compacted", "second, compacted", "live tail"]

    await manager.apply_intent(KEY, RESET)

    (path,) = _archives(_archive_dir)
    document = json.loads(path.read_text(encoding="utf-8"))
    assert [e["content"] for e in document["transcript_entries"]] == canonical
    assert [e["id"] for e in document["transcript_entries"][:2]] == [1, 2]


async def test_reset_archive_is_owner_only(
    manager: SessionManager, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The archive holds whole conversations: 0600 inside a 0700 directory, even under a
    permissive umask."""
    await manager.create(KEY)
    await manager.append_message(KEY, "user", "private")
    directory = tmp_path / "nested" / "vault"
    monkeypatch.setenv("OPENSQUILLA_SESSION_ARCHIVE_DIR", str(directory))

    previous = os.umask(0o022)
    try:
        await manager.apply_intent(KEY, RESET)
    finally:
        os.umask(previous)

    (path,) = _archives(directory)
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in directory.iterdir()] == [path.name]  # no temporary left over


async def test_no_archive_for_an_empty_generation(
    manager: SessionManager, _archive_dir: Path
) -> None:
    """Nothing to keep, no file; a later empty reset adds none either."""
    await manager.create(KEY)

    await manager.apply_intent(KEY, RESET)
    assert _archives(_archive_dir) == []

    await manager.append_message(KEY, "user", "something")
    await manager.apply_intent(KEY, RESET)
    await manager.apply_intent(KEY, RESET)
    assert len(_archives(_archive_dir)) == 1


async def test_summary_alone_is_worth_an_archive(
    manager: SessionManager, storage: SessionStorage, _archive_dir: Path
) -> None:
    node = await manager.create(KEY)
    await storage.save_summary(
        SessionSummary(session_id=node.session_id, session_key=KEY, summary_text="only this")
    )

    await manager.apply_intent(KEY, RESET)

    (path,) = _archives(_archive_dir)
    document = json.loads(path.read_text(encoding="utf-8"))
    assert document["transcript_entries"] == []
    assert [s["summary_text"] for s in document["summaries"]] == ["only this"]


async def test_archive_directory_is_read_at_each_reset(
    manager: SessionManager, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first_dir, second_dir = tmp_path / "first", tmp_path / "second"
    node = await manager.create(KEY)
    await manager.append_message(KEY, "user", "generation one")
    monkeypatch.setenv("OPENSQUILLA_SESSION_ARCHIVE_DIR", str(first_dir))
    renewed, _ = await manager.apply_intent(KEY, RESET)

    await manager.append_message(KEY, "user", "generation two")
    monkeypatch.setenv("OPENSQUILLA_SESSION_ARCHIVE_DIR", str(second_dir))
    await manager.apply_intent(KEY, RESET)

    (first,) = _archives(first_dir)
    (second,) = _archives(second_dir)
    assert json.loads(first.read_text(encoding="utf-8"))["session_id"] == node.session_id
    assert json.loads(second.read_text(encoding="utf-8"))["session_id"] == renewed.session_id


async def test_unusable_archive_directory_does_not_block_the_reset(
    manager: SessionManager,
    storage: SessionStorage,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The archive is best effort: the reset goes on (history deleted) and says so."""
    occupied = tmp_path / "a-regular-file"
    occupied.write_text("not a directory", encoding="utf-8")
    monkeypatch.setenv("OPENSQUILLA_SESSION_ARCHIVE_DIR", str(occupied))
    node = await manager.create(KEY)
    await manager.append_message(KEY, "user", "will be lost")

    with caplog.at_level(logging.WARNING):
        applied, rotated = await manager.apply_intent(KEY, RESET)

    assert rotated is True
    assert applied.session_id != node.session_id
    assert await storage.count_transcript_entries(node.session_id) == 0
    assert occupied.read_text(encoding="utf-8") == "not a directory"
    # An ERROR (issue 31, item 9): the old generation's history is lost.
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert any(KEY in r.getMessage() for r in errors), [r.getMessage() for r in errors]
