"""Security properties: private files, secrets kept out of errors, logs and reprs, and
caller-supplied text only ever reaching SQL as bound parameters."""

from __future__ import annotations

import logging
import os
import stat
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import make_url

from opensquilla.session import SessionManager, SessionStorage
from opensquilla.session.errors import SessionStoreError
from opensquilla.session.models import SessionContextState, SessionIntent
from opensquilla.session.transfer.store import TransferStore

from .scenarios import listening

SECRET = "S3cr3t-pw-never-shown"
LOGGERS = ("", "sqlalchemy", "alembic", "asyncpg", "aiosqlite", "opensquilla")


@pytest.fixture
def umask_022() -> Iterator[None]:
    previous = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(previous)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.usefixtures("umask_022")
async def test_a_database_file_the_store_creates_is_private(tmp_path: Path) -> None:
    """With a permissive umask, the directories the store creates are 0700 and the file
    (and SQLite's WAL and shared-memory files beside it) 0600."""
    outer = tmp_path / "created"
    target = outer / "nested" / "sessions.db"

    async with SessionStorage(target) as storage:
        manager = SessionManager(storage, inject_time_prefix=False)
        await manager.create("agent:main:private")
        await manager.append_message("agent:main:private", "user", "a secret conversation")
        companions = [Path(f"{target}{suffix}") for suffix in ("-wal", "-shm")]
        assert any(p.exists() for p in companions), "expected WAL files while open"
        for path in [target, *companions]:
            if path.exists():
                assert _mode(path) == 0o600, f"{path.name}: {oct(_mode(path))}"

    assert _mode(outer) == 0o700
    assert _mode(outer / "nested") == 0o700
    assert _mode(target) == 0o600


def _everything_shown(exc: BaseException) -> str:
    """What a log or a debugger could show of an error: the formatted traceback and every
    exception of the chain, with its args."""
    parts = ["".join(traceback.format_exception(exc))]
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        parts += [str(current), repr(current), repr(current.args)]
        current = current.__cause__ or current.__context__
    return "\n".join(parts)


def _debug_everywhere(caplog: pytest.LogCaptureFixture) -> None:
    for name in LOGGERS:
        caplog.set_level(logging.DEBUG, logger=name)


def _logged(caplog: pytest.LogCaptureFixture) -> str:
    return (
        "\n".join(
            f"{record.getMessage()} {record.args!r} {record.exc_text or ''}"
            for record in caplog.records
        )
        + caplog.text
    )


async def test_an_unreachable_server_error_does_not_show_the_password(
    caplog: pytest.LogCaptureFixture,
) -> None:
    _debug_everywhere(caplog)
    storage = SessionStorage(f"postgresql://osq_user:{SECRET}@127.0.0.1:1/nowhere", echo=True)

    with pytest.raises(SessionStoreError) as caught:
        await storage.connect()

    shown = _everything_shown(caught.value)
    assert "127.0.0.1" in str(caught.value) or "connect" in str(caught.value).lower()
    assert SECRET not in shown
    assert SECRET not in _logged(caplog)
    assert SECRET not in repr(storage) and SECRET not in str(storage.target)


@pytest.mark.postgres_only
async def test_a_refused_login_does_not_show_the_password(
    backend: Any, caplog: pytest.LogCaptureFixture
) -> None:
    _debug_everywhere(caplog)
    server = make_url(backend.admin_url)
    for url in (
        server.set(username="no_such_role_osq", password=SECRET),
        server.set(password=SECRET, database="no_such_database_osq"),
    ):
        storage = SessionStorage(url.render_as_string(hide_password=False), echo=True)
        with pytest.raises(SessionStoreError) as caught:
            await storage.connect()
        assert SECRET not in _everything_shown(caught.value)
        assert SECRET not in repr(storage)
    assert SECRET not in _logged(caplog)


@pytest.mark.postgres_only
async def test_a_working_connection_never_shows_the_password(
    backend: Any, database: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The local server trusts every login, so a password in the DSN connects: it must
    appear in no log line at DEBUG (statements echoed) and no repr."""
    _debug_everywhere(caplog)
    target = make_url(database).set(password=SECRET).render_as_string(hide_password=False)

    async with SessionStorage(target, echo=True) as storage:
        manager = SessionManager(storage, inject_time_prefix=False)
        await manager.create("agent:main:logged")
        await manager.append_message("agent:main:logged", "user", "hello")
        with pytest.raises(SessionStoreError) as caught:
            await manager.create("agent:main:logged")
        shown = [repr(storage), repr(storage.engine), str(storage.engine.url), repr(storage.target)]

    assert caplog.records, "nothing was logged: the check below would prove nothing"
    assert SECRET not in _logged(caplog)
    assert SECRET not in _everything_shown(caught.value)
    for text in shown:
        assert SECRET not in text, text


HOSTILE_KEY = "agent:main:HOSTILE-KEY'); DROP TABLE sessions; --"
HOSTILE = "HOSTILE-TEXT' OR '1'='1'; DELETE FROM transcript_entries; --\\\"`"


async def test_caller_text_reaches_sql_only_as_bound_parameters(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """A listener sees every statement the store sends while a hostile key and hostile
    text go through every use case: the text is never part of a statement, always a
    parameter."""
    in_statement: list[str] = []
    bound = 0

    def inspect(conn: Any, cursor: Any, statement: str, parameters: Any, *args: Any) -> None:
        nonlocal bound
        for marker in ("HOSTILE-KEY", "HOSTILE-TEXT"):
            if marker in statement:
                in_statement.append(statement)
            if marker in repr(parameters):
                bound += 1

    child = HOSTILE_KEY + ":child"
    with listening(storage, "before_cursor_execute", inspect):
        node = await manager.create(HOSTILE_KEY, label=HOSTILE, display_name=HOSTILE)
        for n in range(6):
            await manager.append_message(
                HOSTILE_KEY,
                "assistant" if n % 2 else HOSTILE,
                f"{HOSTILE} {n}",
                tool_calls=[{HOSTILE: HOSTILE}],
                tool_call_id=f"{HOSTILE}-{n}",
                # The assistant's only (issue 28: refused for another role).
                reasoning_content=HOSTILE if n % 2 else None,
                metadata={HOSTILE: HOSTILE},
                turn_context={HOSTILE: HOSTILE},
                provenance={"source_tool": HOSTILE, "kind": HOSTILE},
                token_count=200,
            )
        await manager.get_transcript(HOSTILE_KEY)
        await manager.branch(HOSTILE_KEY, child, fork_transcript=True)
        await storage.list_sessions(spawned_by=HOSTILE_KEY, parent_session_key=HOSTILE_KEY)
        await manager.save_context_state(
            SessionContextState(
                session_id=node.session_id,
                session_key=HOSTILE_KEY,
                provider=HOSTILE,
                model=HOSTILE,
                state_kind=HOSTILE,
                payload={HOSTILE: HOSTILE},
            )
        )
        await manager.get_context_states(HOSTILE_KEY, provider=HOSTILE, state_kind=HOSTILE)
        await manager.invalidate_context_states(HOSTILE_KEY, provider=HOSTILE, reason=HOSTILE)
        await manager.compact_with_result(
            HOSTILE_KEY,
            600,
            compaction_id=HOSTILE,
            trigger_reason=HOSTILE,
            flush_receipt_status=HOSTILE,
        )
        await manager.mark_compaction_flush_receipt_status(HOSTILE_KEY, HOSTILE, HOSTILE)
        await manager.list_degraded_compactions(agent_id=HOSTILE)
        await manager.update(HOSTILE_KEY, label=HOSTILE, subject=HOSTILE, channel=HOSTILE)
        await manager.get_canonical_transcript(HOSTILE_KEY)
        await manager.preview_truncate(HOSTILE_KEY, 1)
        await manager.truncate(HOSTILE_KEY, 2)
        await manager.preview_reset(HOSTILE_KEY)
        await manager.apply_intent(HOSTILE_KEY, SessionIntent.RESET_SAME_KEY)
        await manager.finish(HOSTILE_KEY)
        await TransferStore(storage, operation="import").existing([HOSTILE_KEY, child])
        await TransferStore(storage, operation="export").read([HOSTILE_KEY])
        await storage.delete_session(child)
        await manager.cap_entries(1)
        await manager.prune_stale(0)

    assert in_statement == []
    assert bound >= 20, f"the hostile text reached only {bound} statements"
    assert await storage.count_sessions() <= 1
