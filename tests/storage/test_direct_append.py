"""The append's two paths (``db/direct_statement.py``): while nothing listens for
statements on the engine it runs on the pool's DBAPI connection; with a listener on a
statement event (attached before or after ``connect()``) it runs through SQLAlchemy's
``Connection``, so instrumentation and fault injection see it. Both end alike: the same
rows, the same errors, a connection never returned to the pool broken.
"""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from sqlalchemy import event, text
from sqlalchemy.engine import Engine
from sqlalchemy.ext.asyncio import create_async_engine

from opensquilla.session import SessionManager, SessionStorage, StaleEpochError
from opensquilla.session.errors import DatabaseError, InvalidInputError
from opensquilla.session.models import INT64_MAX
from tests.helpers import table_snapshot
from tests.storage.direct_paths import (
    KEY,
    async_url,
    entry,
    force_path,
    forced_connection_path,
    listening,
    paths,
)

STATEMENT_EVENTS = ["before_cursor_execute", "after_cursor_execute", "handle_error"]


@pytest.fixture(params=[True, False], ids=["direct", "connection"])
def fast(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Both paths: the direct one as it is, the Connection one forced."""
    force_path(monkeypatch, request.param)
    return bool(request.param)


async def test_without_listeners_the_append_runs_on_the_dbapi_connection(
    storage: SessionStorage, manager: SessionManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = await manager.create(KEY)
    with paths(monkeypatch) as taken:
        first = await manager.append_message(KEY, "user", "one", token_count=3)
        second = await manager.append_message(KEY, "assistant", "two")
    assert taken == ["direct", "direct"]
    assert first.id is not None and second.id is not None and second.id > first.id
    stored = await manager.get_transcript(KEY)
    assert [(e.id, e.role, e.content, e.token_count) for e in stored] == [
        (first.id, "user", "one", 3),
        (second.id, "assistant", "two", None),
    ]
    row = await storage.get_session(KEY)
    assert row is not None and row.total_tokens == 3 and not row.total_tokens_fresh
    assert row.updated_at >= node.updated_at


@pytest.mark.parametrize("name", STATEMENT_EVENTS)
async def test_a_listener_attached_after_connect_sends_the_append_through_the_connection(
    storage: SessionStorage, manager: SessionManager, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    await manager.create(KEY)
    await manager.append_message(KEY, "user", "warm")  # connected, statement compiled
    seen: list[Any] = []
    with paths(monkeypatch) as taken:
        with listening(storage, name, lambda *args: seen.append(args)):
            await manager.append_message(KEY, "user", "watched")
        await manager.append_message(KEY, "user", "unwatched again")
    assert taken == ["connection", "direct"]
    if name != "handle_error":
        assert len(seen) == 1  # the one statement, seen by the listener
    assert [e.content for e in await manager.get_transcript(KEY)] == [
        "warm",
        "watched",
        "unwatched again",
    ]


@pytest.mark.parametrize("name", STATEMENT_EVENTS)
async def test_a_listener_on_an_application_engine_before_connect_is_honoured(
    database: str, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    engine = create_async_engine(async_url(database))
    event.listen(engine.sync_engine, name, lambda *args: None)
    try:
        async with SessionStorage(engine) as storage:
            manager = SessionManager(storage, inject_time_prefix=False)
            await manager.create(KEY)
            with paths(monkeypatch) as taken:
                await manager.append_message(KEY, "user", "watched")
        assert taken == ["connection"]
    finally:
        await engine.dispose()


async def test_statement_logging_sends_the_append_through_the_connection(
    database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``echo=True``: the Connection path, which logs the statement."""
    async with SessionStorage(database, echo=True) as storage:
        manager = SessionManager(storage, inject_time_prefix=False)
        await manager.create(KEY)
        with paths(monkeypatch) as taken:
            await manager.append_message(KEY, "user", "logged")
    assert taken == ["connection"]


async def test_a_failing_statement_reaches_handle_error_and_fails_alike(
    backend: Any, storage: SessionStorage, manager: SessionManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The database refusing the row (a test trigger): ``handle_error`` listeners see it
    (the Connection path), and the error is the same ``DatabaseError`` on both paths."""
    node = await manager.create(KEY)
    async with storage.engine.begin() as conn:
        for statement in _refusing_trigger(storage.engine.dialect.name):
            await conn.execute(text(statement))
    errors: list[Any] = []
    raised: dict[str, BaseException] = {}
    with paths(monkeypatch) as taken:
        for path in ("direct", "connection"):
            listener = contextlib.nullcontext()
            if path == "connection":
                listener = listening(storage, "handle_error", errors.append)  # type: ignore[assignment]
            before = await table_snapshot(storage)
            with listener, pytest.raises(DatabaseError) as caught:
                await storage.append_message_entry(
                    entry(node, "refused"), expected_epoch=0, now=node.updated_at + 1
                )
            assert await table_snapshot(storage) == before
            raised[path] = caught.value
    assert taken == ["direct", "connection"]
    assert len(errors) == 1
    assert type(raised["direct"]) is type(raised["connection"])
    assert str(raised["direct"]) == str(raised["connection"])
    assert "refused by the test" in str(raised["direct"])


def _refusing_trigger(dialect: str) -> list[str]:
    if dialect == "sqlite":
        return [
            "CREATE TRIGGER test_refuse BEFORE INSERT ON transcript_entries "
            "WHEN NEW.content = 'refused' BEGIN SELECT RAISE(ABORT, 'refused by the test'); END"
        ]
    return [
        "CREATE FUNCTION test_refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        "IF NEW.content = 'refused' THEN RAISE EXCEPTION 'refused by the test'; END IF; "
        "RETURN NEW; END $$",
        "CREATE TRIGGER test_refuse BEFORE INSERT ON transcript_entries "
        "FOR EACH ROW EXECUTE FUNCTION test_refuse()",
    ]


async def _outcome(call: Any) -> tuple[type[BaseException], str] | None:
    try:
        await call
    except Exception as exc:
        return type(exc), str(exc)
    return None


@pytest.mark.parametrize("case", ["stale epoch", "other generation", "missing session"])
async def test_refusals_are_the_same_on_both_paths(
    storage: SessionStorage, manager: SessionManager, case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    outcomes = []
    taken = paths(monkeypatch).__enter__()  # patched for the rest of the test
    for fast in (True, False):
        key = f"{KEY}:{'direct' if fast else 'connection'}"
        node = await manager.create(key)
        epoch, session_id = node.epoch, node.session_id
        if case == "stale epoch":
            epoch += 1
        elif case == "other generation":
            session_id = (await manager.create(f"{key}:other")).session_id
        else:
            assert await manager.delete(key)
        refused = entry(node, "refused", session_id=session_id)
        refused.session_key = key
        before = await table_snapshot(storage)
        with contextlib.ExitStack() as stack:
            if not fast:
                stack.enter_context(forced_connection_path())
            outcome = await _outcome(
                storage.append_message_entry(
                    refused, expected_epoch=epoch, now=node.updated_at + 1, token_delta=2
                )
            )
        assert await table_snapshot(storage) == before
        assert outcome is not None
        message = outcome[1].replace(key, "KEY").replace(session_id, "SID")
        outcomes.append((outcome[0], message.replace(node.session_id, "NODE")))
    # A silent fallback would compare one path with itself. The direct path's refusal with
    # a token delta then tells a stale fence from an overflow through a Connection.
    assert taken == ["direct", "connection", "connection"]
    assert outcomes[0] == outcomes[1]
    assert outcomes[0][0] is StaleEpochError
    assert (
        outcomes[0][1]
        == {
            "stale epoch": "Epoch mismatch for KEY: expected 1, got 0",
            "other generation": "Generation mismatch for KEY: expected SID, got NODE",
            "missing session": "Epoch mismatch for KEY: expected 0, got None",
        }[case]
    )


async def test_an_overflowing_delta_is_refused_alike_on_both_paths(
    storage: SessionStorage, manager: SessionManager, fast: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = await manager.create(KEY)
    with paths(monkeypatch) as taken:
        await storage.append_message_entry(
            entry(node, "big"), expected_epoch=0, now=node.updated_at, token_delta=INT64_MAX - 5
        )
        before = await table_snapshot(storage)
        with pytest.raises(InvalidInputError, match=r"would take total_tokens of .* past"):
            await storage.append_message_entry(
                entry(node, "too big"), expected_epoch=0, now=node.updated_at + 1, token_delta=6
            )
    assert await table_snapshot(storage) == before
    path = "direct" if fast else "connection"
    # the refused append's overflow check runs through a Connection on either path
    assert taken == [path, path, "connection"] if fast else [path, path]


@pytest.mark.parametrize("name", ["begin", "engine_connect", "rollback", "commit"])
async def test_a_listener_on_a_connection_event_sends_the_append_through_the_connection(
    storage: SessionStorage, manager: SessionManager, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """The Connection path fires ``begin`` (an autobegin, even in autocommit),
    ``engine_connect`` and ``rollback``/``commit``: a listener on one of them is honoured;
    the store's own (SQLite's BEGIN recipe, the autocommit view's isolation level) are not
    counted."""
    await manager.create(KEY)
    await manager.append_message(KEY, "user", "warm")
    seen: list[Any] = []
    with paths(monkeypatch) as taken:
        with listening(storage, name, lambda *args: seen.append(args)):
            await manager.append_message(KEY, "user", "watched")
        await manager.append_message(KEY, "user", "unwatched again")
    assert taken == ["connection", "direct"]
    if name in ("begin", "engine_connect"):
        assert seen
    assert len(await manager.get_transcript(KEY)) == 3


@pytest.mark.parametrize("name", ["before_cursor_execute", "begin"])
async def test_a_class_level_engine_listener_is_honoured(
    storage: SessionStorage, manager: SessionManager, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """``event.listen(Engine, ...)`` watches every engine's statements, the store's too."""
    await manager.create(KEY)
    seen: list[Any] = []

    def listener(*args: Any) -> None:
        seen.append(args)

    with paths(monkeypatch) as taken:
        event.listen(Engine, name, listener)
        try:
            await manager.append_message(KEY, "user", "watched")
        finally:
            event.remove(Engine, name, listener)
        await manager.append_message(KEY, "user", "unwatched")
    assert taken == ["connection", "direct"]
    assert seen


@pytest.mark.parametrize("token_delta", [0, 7])
async def test_the_direct_path_sends_what_the_connection_path_sends(
    storage: SessionStorage,
    manager: SessionManager,
    monkeypatch: pytest.MonkeyPatch,
    token_delta: int,
) -> None:
    """The SQL and the parameters the direct path hands the driver equal what a
    ``before_cursor_execute`` listener sees on the Connection path for the same append
    (catches a drift in SQLAlchemy's compilation or binding)."""
    node = await manager.create(KEY)
    await manager.append_message(KEY, "user", "warm")  # what is looked up once, looked up
    dialect: Any = storage.engine.sync_engine.dialect
    original = dialect.do_execute
    sent: dict[str, tuple[str, tuple[Any, ...]]] = {}

    def recording(cursor: Any, statement: str, parameters: Any, context: Any = None) -> Any:
        if "INSERT" in statement:
            sent.setdefault("direct", (statement, tuple(parameters)))
        return original(cursor, statement, parameters, context)

    def seen(conn: Any, cursor: Any, statement: str, parameters: Any, *args: Any) -> None:
        if "INSERT" in statement:
            sent.setdefault("connection", (statement, tuple(parameters)))

    append = entry(node, "the same")
    with paths(monkeypatch) as taken:
        with monkeypatch.context() as patch:
            patch.setattr(dialect, "do_execute", recording)
            await storage.append_message_entry(
                append, expected_epoch=0, now=node.updated_at + 1, token_delta=token_delta
            )
        with listening(storage, "before_cursor_execute", seen):
            await storage.append_message_entry(
                append, expected_epoch=0, now=node.updated_at + 1, token_delta=token_delta
            )
    assert taken == ["direct", "connection"]
    assert sent["direct"] == sent["connection"]
    assert "transcript_" in sent["direct"][0] and "the same" in sent["direct"][1]
