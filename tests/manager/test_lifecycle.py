"""Session lifecycle through the manager: create, read, get-or-create, resume, update,
finish, archive, and the time prefix stamped on user messages."""

from __future__ import annotations

import re
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

import pytest

from opensquilla.session import SessionManager, SessionStorage
from opensquilla.session.errors import (
    ConfigurationError,
    InvalidInputError,
    ProtectedFieldError,
    SessionExistsError,
    SessionNotFoundError,
)
from opensquilla.session.models import SessionStatus
from opensquilla.session.support.clock import now_ms
from tests.helpers import table_snapshot

KEY = "agent:main:lifecycle"


async def _age(storage: SessionStorage, key: str, *, updated_at: int = 1) -> None:
    """Push the row's ``updated_at`` into the past so that a touch is visible."""
    node = await storage.get_session(key)
    assert node is not None
    node.updated_at = updated_at
    await storage.upsert_session(node)


# -- create -------------------------------------------------------------------------------


async def test_create_returns_a_fresh_running_session(manager: SessionManager) -> None:
    """A new row starts running, at epoch 0, with one timestamp for all three clocks."""
    before = now_ms()
    node = await manager.create(KEY)
    after = now_ms()

    assert node.session_key == KEY
    assert node.status == SessionStatus.RUNNING
    assert str(uuid.UUID(node.session_id)) == node.session_id
    assert node.created_at == node.updated_at == node.started_at
    assert before <= node.created_at <= after
    assert node.epoch == 0
    assert node.total_tokens == 0 and node.compaction_count == 0
    assert node.ended_at is None and node.runtime_ms is None
    assert node.agent_id == "main"


async def test_create_persists_the_returned_node(manager: SessionManager) -> None:
    """What ``create`` hands back is what a later read sees, field for field."""
    node = await manager.create(KEY, model="gpt-x", channel="slack", label="night shift")

    stored = await manager.get_session(KEY)

    assert stored is not None
    assert stored.model_dump() == node.model_dump()
    assert (stored.model, stored.channel, stored.label) == ("gpt-x", "slack", "night shift")


async def test_create_canonicalises_key_and_agent(manager: SessionManager) -> None:
    """Any spelling of a key reaches the canonical row; the agent id is normalised too."""
    node = await manager.create("  agent:Main:Mixed  ", agent_id="Default")

    assert node.session_key == "agent:main:Mixed"
    assert node.agent_id == "main"
    assert await manager.get_session("agent:MAIN:Mixed") is not None


async def test_each_session_gets_its_own_id(manager: SessionManager) -> None:
    """Session ids are per row, never reused between keys."""
    first = await manager.create("agent:main:one")
    second = await manager.create("agent:main:two")

    assert first.session_id != second.session_id


async def test_create_refuses_an_existing_key(manager: SessionManager) -> None:
    """A taken key is a ValueError and the stored row keeps its identity."""
    original = await manager.create(KEY, model="first")

    with pytest.raises(ValueError) as caught:
        await manager.create("agent:MAIN:lifecycle", model="second")

    assert isinstance(caught.value, SessionExistsError)
    stored = await manager.get_session(KEY)
    assert stored is not None
    assert stored.session_id == original.session_id
    assert stored.model == "first"


async def test_create_refuses_unknown_fields(manager: SessionManager) -> None:
    """A typo in a keyword is an error, not a silently dropped value."""
    with pytest.raises(InvalidInputError):
        await manager.create(KEY, modell="gpt-x")

    assert await manager.get_session(KEY) is None


# -- reads ---------------------------------------------------------------------------------


async def test_get_session_is_read_only(manager: SessionManager, storage: SessionStorage) -> None:
    """Reading a session must not count as activity (retention relies on updated_at)."""
    await manager.create(KEY)
    await _age(storage, KEY, updated_at=1234)

    fetched = await manager.get_session(KEY)
    again = await storage.get_session(KEY)

    assert fetched is not None and again is not None
    assert fetched.updated_at == 1234
    assert again.updated_at == 1234


async def test_get_session_of_a_missing_key_is_none(manager: SessionManager) -> None:
    """A missing key is a normal answer, not an error."""
    await manager.create(KEY)

    assert await manager.get_session("agent:main:absent") is None


async def test_get_or_create_creates_when_missing(manager: SessionManager) -> None:
    """The first call creates, with the given fields."""
    node, created = await manager.get_or_create(KEY, model="gpt-x")

    assert created is True
    assert node.model == "gpt-x"
    stored = await manager.get_session(KEY)
    assert stored is not None and stored.session_id == node.session_id


async def test_get_or_create_returns_existing_untouched(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """An existing row comes back as stored: no touch, no new fields applied."""
    original = await manager.create(KEY, model="kept")
    await _age(storage, KEY, updated_at=77)

    node, created = await manager.get_or_create("agent:Main:lifecycle", model="ignored")

    assert created is False
    assert node.session_id == original.session_id
    assert node.model == "kept"
    assert node.updated_at == 77
    stored = await manager.get_session(KEY)
    assert stored is not None and stored.updated_at == 77 and stored.model == "kept"


# -- resume --------------------------------------------------------------------------------


async def test_resume_touches_updated_at(manager: SessionManager, storage: SessionStorage) -> None:
    """Resuming marks the session active now; nothing else changes."""
    original = await manager.create(KEY)
    await _age(storage, KEY)

    before = now_ms()
    resumed = await manager.resume(KEY)

    assert resumed.updated_at >= before
    assert resumed.session_id == original.session_id
    assert resumed.created_at == original.created_at
    stored = await manager.get_session(KEY)
    assert stored is not None and stored.updated_at == resumed.updated_at


# -- update --------------------------------------------------------------------------------


async def test_update_sets_fields_and_touches(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """Mutable fields are written and the session counts as active."""
    original = await manager.create(KEY)
    await _age(storage, KEY)

    updated = await manager.update(KEY, model="claude-x", channel="telegram", label="ops")

    assert (updated.model, updated.channel, updated.label) == ("claude-x", "telegram", "ops")
    assert updated.updated_at > 1
    assert updated.session_id == original.session_id
    stored = await manager.get_session(KEY)
    assert stored is not None
    assert (stored.model, stored.channel, stored.label) == ("claude-x", "telegram", "ops")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("session_key", "agent:main:elsewhere"),
        ("session_id", "00000000-0000-4000-8000-000000000000"),
        ("epoch", 9),
        ("created_at", 5),
        ("compaction_count", 3),
    ],
)
async def test_update_refuses_protected_fields(
    manager: SessionManager, storage: SessionStorage, field: str, value: object
) -> None:
    """Identity, fencing and bookkeeping belong to the store; nothing is written at all."""
    await manager.create(KEY)
    before = await table_snapshot(storage)

    with pytest.raises(ProtectedFieldError) as caught:
        await manager.update(KEY, model="would-be-set", **{field: value})

    assert isinstance(caught.value, ValueError)
    assert await table_snapshot(storage) == before


async def test_update_refuses_unknown_fields(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """An unknown name is an error and the known names next to it are not applied."""
    await manager.create(KEY)
    before = await table_snapshot(storage)

    with pytest.raises(InvalidInputError):
        await manager.update(KEY, model="would-be-set", no_such_field=1)

    assert await table_snapshot(storage) == before


# -- finish and archive -------------------------------------------------------------------


async def test_finish_defaults_to_done_and_measures_runtime(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """runtime_ms is the exact distance between start and end."""
    await manager.create(KEY)
    node = await storage.get_session(KEY)
    assert node is not None
    node.started_at = now_ms() - 5_000
    await storage.upsert_session(node)

    finished = await manager.finish(KEY)

    assert finished.status == SessionStatus.DONE
    assert finished.ended_at is not None
    assert finished.updated_at == finished.ended_at
    assert finished.runtime_ms == finished.ended_at - node.started_at
    assert finished.runtime_ms >= 5_000
    stored = await manager.get_session(KEY)
    assert stored is not None and stored.status == "done"
    assert stored.runtime_ms == finished.runtime_ms


async def test_finish_with_failed_status(manager: SessionManager) -> None:
    await manager.create(KEY)

    finished = await manager.finish(KEY, status=SessionStatus.FAILED)

    assert finished.status == SessionStatus.FAILED
    stored = await manager.get_session(KEY)
    assert stored is not None and stored.status == "failed"


async def test_finish_accepts_the_plain_string_value(manager: SessionManager) -> None:
    await manager.create(KEY)

    finished = await manager.finish(KEY, status="timeout")

    assert finished.status == SessionStatus.TIMEOUT


async def test_finish_refuses_an_unknown_status(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """A status outside the enum never reaches the row."""
    await manager.create(KEY)
    before = await table_snapshot(storage)

    with pytest.raises(ValueError):
        await manager.finish(KEY, status="half-done")

    assert await table_snapshot(storage) == before


async def test_archive_is_a_soft_finish(manager: SessionManager) -> None:
    """Archiving marks the session done and keeps every row it owns."""
    await manager.create(KEY)
    await manager.append_message(KEY, "user", "keep me")

    assert await manager.archive(KEY) is None

    stored = await manager.get_session(KEY)
    assert stored is not None
    assert stored.status == SessionStatus.DONE
    assert stored.ended_at is not None
    assert [e.content for e in await manager.get_transcript(KEY)] == ["keep me"]


async def test_lifecycle_calls_on_a_missing_session_are_key_errors(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """Touching, updating or finishing nothing must fail loudly and never create a row."""
    ghost = "agent:main:ghost"
    calls: dict[str, Callable[[], Awaitable[object]]] = {
        "resume": lambda: manager.resume(ghost),
        "update": lambda: manager.update(ghost, model="x"),
        "finish": lambda: manager.finish(ghost),
        "archive": lambda: manager.archive(ghost),
    }

    for name, call in calls.items():
        with pytest.raises(KeyError, match="Session not found") as caught:
            await call()
        assert isinstance(caught.value, SessionNotFoundError), name
        assert await storage.count_sessions() == 0, name


# -- time prefix ---------------------------------------------------------------------------

_UTC_STAMP = re.compile(
    r"^\[(\d{4}-\d{2}-\d{2}T\d{2}:\d{2})\+00:00 (Mon|Tue|Wed|Thu|Fri|Sat|Sun) UTC\]\n"
)


def _stamping(storage: SessionStorage, tz: str | None = "UTC") -> SessionManager:
    return SessionManager(storage, inject_time_prefix=True, time_prefix_tz=tz)


async def test_time_prefix_stamps_user_text(storage: SessionStorage) -> None:
    """A user message gets one line with the current minute, weekday and zone."""
    manager = _stamping(storage)
    await manager.create(KEY)

    start = datetime.now(UTC).replace(second=0, microsecond=0)
    entry = await manager.append_message(KEY, "user", "what time is it?")
    end = datetime.now(UTC)

    assert entry.content is not None
    match = _UTC_STAMP.match(entry.content)
    assert match is not None, entry.content
    assert entry.content[match.end() :] == "what time is it?"
    stamped = datetime.strptime(match.group(1), "%Y-%m-%dT%H:%M").replace(tzinfo=UTC)
    assert start <= stamped <= end
    assert match.group(2) == stamped.strftime("%a")
    stored = await manager.get_transcript(KEY)
    assert [e.content for e in stored] == [entry.content]


async def test_time_prefix_uses_the_configured_zone(storage: SessionStorage) -> None:
    """The offset and zone name follow ``time_prefix_tz``."""
    manager = _stamping(storage, tz="Asia/Kolkata")
    await manager.create(KEY)

    entry = await manager.append_message(KEY, "user", "namaste")

    assert entry.content is not None
    assert re.match(
        r"^\[\d{4}-\d{2}-\d{2}T\d{2}:\d{2}\+05:30 [A-Z][a-z]{2} IST\]\nnamaste$", entry.content
    ), entry.content


async def test_time_prefix_zone_falls_back_to_the_environment(
    storage: SessionStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without an explicit zone, OPENSQUILLA_TIMEZONE decides."""
    monkeypatch.setenv("OPENSQUILLA_TIMEZONE", "Asia/Tokyo")
    manager = _stamping(storage, tz=None)
    await manager.create(KEY)

    entry = await manager.append_message(KEY, "user", "konnichiwa")

    assert entry.content is not None
    assert "+09:00" in entry.content.splitlines()[0]
    assert entry.content.endswith("\nkonnichiwa")


@pytest.mark.parametrize(
    "content",
    [
        "",
        "   \n\t",
        "[2026-11-29T13:36+00:00 Sun UTC]\nalready stamped",
        '{"attachments": []}',
        '  \n {"envelope": true}',
    ],
    ids=["empty", "blank", "stamped", "json", "indented-json"],
)
async def test_time_prefix_leaves_some_user_content_alone(
    storage: SessionStorage, content: str
) -> None:
    """Empty text, stamped text and JSON envelopes are stored verbatim."""
    manager = _stamping(storage)
    await manager.create(KEY)

    entry = await manager.append_message(KEY, "user", content)

    assert entry.content == content
    assert [e.content for e in await manager.get_transcript(KEY)] == [content]


async def test_time_prefix_applies_to_user_messages_only(storage: SessionStorage) -> None:
    manager = _stamping(storage)
    await manager.create(KEY)

    for role in ("assistant", "system", "tool"):
        entry = await manager.append_message(KEY, role, f"plain {role} words")
        assert entry.content == f"plain {role} words"


@pytest.mark.parametrize(
    ("zone", "said"),
    [
        ("Not/A_Zone", "'Not/A_Zone' is not a time zone"),
        ("utc+2", "is not a time zone"),
        ("../../etc/passwd", "is not a time zone"),
        ("", "not blank"),
        ("   ", "not blank"),
        (5, "not int"),
    ],
)
async def test_a_time_prefix_zone_that_names_no_zone_is_refused(
    storage: SessionStorage, monkeypatch: pytest.MonkeyPatch, zone: object, said: str
) -> None:
    """It used to stamp UTC (or whatever the environment named) silently: a typo in the
    zone put every user message at the wrong time."""
    monkeypatch.setenv("OPENSQUILLA_TIMEZONE", "Asia/Kolkata")
    with pytest.raises(ConfigurationError, match="time_prefix_tz") as refused:
        SessionManager(storage, inject_time_prefix=True, time_prefix_tz=zone)  # type: ignore[arg-type]
    assert said in str(refused.value)


async def test_a_time_prefix_zone_from_the_environment_that_names_none_is_passed_over(
    storage: SessionStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The environment is the machine's setting, not an argument: as before, a variable
    naming no zone is passed over for the next one."""
    monkeypatch.setenv("OPENSQUILLA_TIMEZONE", "Not/A_Zone")
    monkeypatch.setenv("TZ", "UTC")
    manager = SessionManager(storage, inject_time_prefix=True)
    await manager.create(KEY)
    entry = await manager.append_message(KEY, "user", "hello")
    assert entry.content is not None and _UTC_STAMP.match(entry.content), entry.content
