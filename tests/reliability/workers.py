"""Code that runs in separate worker processes (``multiprocessing`` with ``spawn``).

Each public function is a top-level, picklable entry point: it runs ``asyncio.run`` on its
own storage (its own engine and connection pool) and returns plain data, so a parent test
can check what every process believed happened against what the database holds. Workers
never raise for an expected refusal; they record it, together with anything unexpected,
so the parent sees every error instead of the first one.

All workers that race take ``start_at`` (a ``time.time()`` value): they connect first and
then wait for that moment, so the interesting part overlaps instead of starting staggered
by interpreter start-up.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import event

from opensquilla.session import SessionManager, SessionStorage
from opensquilla.session.compaction import CompactionConfig
from opensquilla.session.compaction.summarizer import FallbackSummarizer
from opensquilla.session.errors import (
    SessionExistsError,
    SessionNotFoundError,
    StaleEpochError,
)
from opensquilla.session.models import (
    SessionContextState,
    SessionIntent,
    SessionNode,
    TranscriptEntry,
)

ARCHIVE_DIR_ENV = "OPENSQUILLA_SESSION_ARCHIVE_DIR"


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


async def _wait_until(start_at: float) -> None:
    delay = start_at - time.time()
    if delay > 0:
        await asyncio.sleep(delay)


def warm(seconds: float) -> int:
    """Boot the interpreter and import the package; keeps the worker busy for ``seconds``
    so that every worker of a pool is started, not one reused."""
    time.sleep(seconds)
    return os.getpid()


# -- appends -------------------------------------------------------------------------------


def append_writer(
    target: str, key: str, writer: int, count: int, start_at: float, tokens: int = 0
) -> dict[str, Any]:
    """Append ``count`` messages ``w<writer>-<n>`` one after the other."""
    return asyncio.run(_append_writer(target, key, writer, count, start_at, tokens))


async def _append_writer(
    target: str, key: str, writer: int, count: int, start_at: float, tokens: int
) -> dict[str, Any]:
    done: list[tuple[str, int | None, str]] = []
    errors: list[str] = []
    async with SessionStorage(target) as storage:
        manager = SessionManager(storage, inject_time_prefix=False)
        await _wait_until(start_at)
        first = time.time()
        for n in range(count):
            content = f"w{writer}-{n:03d}"
            try:
                entry = await manager.append_message(
                    key, "user", content, token_count=tokens or writer + 1
                )
            except Exception as exc:
                errors.append(_describe(exc))
                continue
            done.append((content, entry.id, entry.session_id))
        last = time.time()
    return {"pid": os.getpid(), "done": done, "errors": errors, "first": first, "last": last}


def fenced_appender(
    target: str, key: str, writer: int, count: int, pause: float, start_at: float
) -> dict[str, Any]:
    """Append while another process resets the key: each append lands or is refused as
    stale; ``outcomes`` says which, with the generation and message id it landed in."""
    return asyncio.run(_fenced_appender(target, key, writer, count, pause, start_at))


async def _fenced_appender(
    target: str, key: str, writer: int, count: int, pause: float, start_at: float
) -> dict[str, Any]:
    outcomes: list[dict[str, Any]] = []
    errors: list[str] = []
    async with SessionStorage(target) as storage:
        manager = SessionManager(storage, inject_time_prefix=False)
        await _wait_until(start_at)
        for n in range(count):
            content = f"f{writer}-{n:03d}"
            try:
                entry = await manager.append_message(key, "user", content)
            except StaleEpochError:
                outcomes.append({"content": content, "status": "stale"})
            except Exception as exc:
                errors.append(_describe(exc))
            else:
                outcomes.append(
                    {
                        "content": content,
                        "status": "ok",
                        "session_id": entry.session_id,
                        "message_id": entry.message_id,
                    }
                )
            await asyncio.sleep(pause)
    return {"pid": os.getpid(), "outcomes": outcomes, "errors": errors}


def resetter(
    target: str, key: str, resets: int, pause: float, start_at: float, archive_dir: str
) -> dict[str, Any]:
    """``apply_intent(key, RESET_SAME_KEY)`` ``resets`` times, ``pause`` seconds apart;
    ``generations`` lists the session id each reset started."""
    os.environ[ARCHIVE_DIR_ENV] = archive_dir
    return asyncio.run(_resetter(target, key, resets, pause, start_at))


async def _resetter(
    target: str, key: str, resets: int, pause: float, start_at: float
) -> dict[str, Any]:
    generations: list[str] = []
    errors: list[str] = []
    async with SessionStorage(target) as storage:
        manager = SessionManager(storage, inject_time_prefix=False)
        await _wait_until(start_at)
        for _ in range(resets):
            await asyncio.sleep(pause)
            try:
                node, rotated = await manager.apply_intent(key, SessionIntent.RESET_SAME_KEY)
            except Exception as exc:
                errors.append(_describe(exc))
                continue
            if not rotated:
                errors.append("apply_intent(RESET_SAME_KEY) did not rotate")
            generations.append(node.session_id)
    return {"pid": os.getpid(), "generations": generations, "errors": errors}


# -- get_or_create -------------------------------------------------------------------------


def get_or_create_caller(
    target: str, keys: Sequence[str], start_at: float, slot: float
) -> dict[str, Any]:
    """``get_or_create`` key ``i`` at ``start_at + i * slot``: every process asks for the
    same key at the same moment. ``attempts`` counts this process's inserts per key, so
    the parent can tell whether two processes really raced for one."""
    return asyncio.run(_get_or_create_caller(target, list(keys), start_at, slot))


async def _get_or_create_caller(
    target: str, keys: list[str], start_at: float, slot: float
) -> dict[str, Any]:
    created: dict[str, bool] = {}
    session_ids: dict[str, str] = {}
    attempts: dict[str, int] = {}
    errors: list[str] = []
    async with SessionStorage(target) as storage:
        insert = storage.create_session

        async def counted_insert(node: SessionNode) -> bool:
            attempts[node.session_key] = attempts.get(node.session_key, 0) + 1
            return await insert(node)

        storage.create_session = counted_insert  # type: ignore[method-assign]
        manager = SessionManager(storage, inject_time_prefix=False)
        for index, key in enumerate(keys):
            await _wait_until(start_at + index * slot)
            try:
                node, was_created = await manager.get_or_create(key)
            except Exception as exc:
                errors.append(_describe(exc))
                continue
            created[key] = was_created
            session_ids[key] = node.session_id
    return {
        "pid": os.getpid(),
        "created": created,
        "session_ids": session_ids,
        "attempts": attempts,
        "errors": errors,
    }


# -- compaction ----------------------------------------------------------------------------


class SlowSummarizer:
    """The fallback summary, after a pause: keeps a compaction between its read and its
    commit long enough for other processes to act."""

    source = "fallback"

    def __init__(self, delay: float) -> None:
        self._delay = delay
        self._inner = FallbackSummarizer()

    async def summarize(
        self,
        chunk: Sequence[Mapping[str, Any]],
        *,
        config: CompactionConfig,
        custom_instructions: str | None,
    ) -> str | None:
        await asyncio.sleep(self._delay)
        return await self._inner.summarize(
            chunk, config=config, custom_instructions=custom_instructions
        )


def compactor(
    target: str,
    key: str,
    worker: int,
    rounds: int,
    window: int,
    delay: float,
    pause: float,
    start_at: float,
    extra_rounds: int = 0,
) -> dict[str, Any]:
    """Compact ``key`` ``rounds`` times with a slow summariser; reports each compaction id
    and whether it committed. Up to ``extra_rounds`` more while writers keep overtaking
    it, so that one compaction gets to commit once they stop."""
    return asyncio.run(
        _compactor(target, key, worker, rounds, window, delay, pause, start_at, extra_rounds)
    )


async def _compactor(
    target: str,
    key: str,
    worker: int,
    rounds: int,
    window: int,
    delay: float,
    pause: float,
    start_at: float,
    extra_rounds: int,
) -> dict[str, Any]:
    results: list[dict[str, Any]] = []
    errors: list[str] = []
    async with SessionStorage(target) as storage:
        manager = SessionManager(storage, inject_time_prefix=False)
        await _wait_until(start_at)
        index = 0
        while index < rounds or (
            index < rounds + extra_rounds
            and not any(r["committed"] for r in results)
            and results
            and results[-1]["skip_reason"] == "stale_preimage"
        ):
            compaction_id = f"cmp-{worker}-{index}"
            index += 1
            try:
                result = await manager.compact_with_result(
                    key, window, compaction_id=compaction_id, summarizer=SlowSummarizer(delay)
                )
            except Exception as exc:
                errors.append(_describe(exc))
                continue
            results.append(
                {
                    "compaction_id": compaction_id,
                    "committed": result.removed_count > 0 and result.skip_reason is None,
                    "removed": result.removed_count,
                    "skip_reason": result.skip_reason,
                    "at": time.time(),
                }
            )
            await asyncio.sleep(pause)
    return {"pid": os.getpid(), "results": results, "errors": errors}


# -- retention racing appends and branches -------------------------------------------------


def churn_writer(
    target: str,
    prefix: str,
    worker: int,
    sessions: int,
    appends: int,
    start_at: float,
    done_flag: str,
) -> dict[str, Any]:
    """Create sessions, append to them and fork them (full fork) while retention deletes;
    create the file ``done_flag`` when finished.

    ``acked`` lists every append this process saw commit, with the generation it landed
    in; ``forks`` every child it saw created, with the parent contents it must hold.
    """
    try:
        return asyncio.run(_churn_writer(target, prefix, worker, sessions, appends, start_at))
    finally:
        Path(done_flag).touch()


async def _churn_writer(
    target: str, prefix: str, worker: int, sessions: int, appends: int, start_at: float
) -> dict[str, Any]:
    acked: list[dict[str, Any]] = []
    forks: list[dict[str, Any]] = []
    refused: list[str] = []
    errors: list[str] = []
    async with SessionStorage(target) as storage:
        manager = SessionManager(storage, inject_time_prefix=False)
        await _wait_until(start_at)
        first = time.time()
        for number in range(sessions):
            key = f"{prefix}:w{worker}:s{number:02d}"
            try:
                node, _ = await manager.get_or_create(key)
            except Exception as exc:
                errors.append(_describe(exc))
                continue
            written: list[str] = []
            for n in range(appends):
                content = f"{key}#{n}"
                try:
                    entry = await manager.append_message(key, "user", content, token_count=1)
                except (SessionNotFoundError, StaleEpochError) as exc:
                    refused.append(_describe(exc))  # retention deleted the session meanwhile
                    break
                except Exception as exc:
                    errors.append(_describe(exc))
                    break
                if entry.session_id != node.session_id:
                    # Deleted and re-created by another path: not expected in this test.
                    errors.append(f"append to {key} landed in an unknown generation")
                    break
                written.append(content)
                acked.append({"key": key, "session_id": entry.session_id, "content": content})
            child_key = f"{key}:child"
            try:
                child = await manager.branch(key, child_key, fork_transcript=True)
            except SessionNotFoundError as exc:
                refused.append(_describe(exc))
                continue
            except Exception as exc:
                errors.append(_describe(exc))
                continue
            if child.forked_from_parent:
                forks.append(
                    {
                        "key": child_key,
                        "session_id": child.session_id,
                        "parent_session_id": node.session_id,
                        "contents": written,
                    }
                )
        last = time.time()
    return {
        "pid": os.getpid(),
        "acked": acked,
        "forks": forks,
        "refused": refused,
        "errors": errors,
        "first": first,
        "last": last,
    }


def retention_runner(
    target: str,
    stop_flags: Sequence[str],
    cap: int,
    max_age_ms: int,
    pause: float,
    start_at: float,
) -> dict[str, Any]:
    """Alternate ``cap_entries(cap)`` and ``prune_stale(max_age_ms)`` until every file in
    ``stop_flags`` exists (the writers are done); counts deletions and when they happened."""
    return asyncio.run(
        _retention_runner(target, list(stop_flags), cap, max_age_ms, pause, start_at)
    )


async def _retention_runner(
    target: str, stop_flags: list[str], cap: int, max_age_ms: int, pause: float, start_at: float
) -> dict[str, Any]:
    capped = pruned = 0
    deletion_times: list[float] = []
    errors: list[str] = []
    async with SessionStorage(target) as storage:
        manager = SessionManager(storage, inject_time_prefix=False)
        await _wait_until(start_at)
        give_up = time.time() + 60
        while time.time() < give_up and not all(Path(f).exists() for f in stop_flags):
            await asyncio.sleep(pause)
            try:
                n = await manager.cap_entries(cap)
                capped += n
                m = await manager.prune_stale(max_age_ms)
                pruned += m
            except Exception as exc:
                errors.append(_describe(exc))
                continue
            if n or m:
                deletion_times.append(time.time())
    return {
        "pid": os.getpid(),
        "capped": capped,
        "pruned": pruned,
        "deletion_times": deletion_times,
        "errors": errors,
    }


# -- connect / migrate ---------------------------------------------------------------------

_SCHEMA_CHANGES = ("CREATE ", "ALTER ", "DROP ", "INSERT INTO ALEMBIC_VERSION")


def connect_worker(target: str, start_at: float) -> dict[str, Any]:
    """``connect()`` (which migrates) at ``start_at``; counts the schema statements this
    process ran, so the parent can tell that exactly one process migrated."""
    return asyncio.run(_connect_worker(target, start_at))


async def _connect_worker(target: str, start_at: float) -> dict[str, Any]:
    from opensquilla.session import storage as storage_module

    schema_statements: list[str] = []
    original = storage_module.create_engine

    def instrumented(*args: Any, **kwargs: Any) -> Any:
        engine = original(*args, **kwargs)

        @event.listens_for(engine.sync_engine, "before_cursor_execute")
        def _count(
            conn: Any, cursor: Any, statement: str, params: Any, context: Any, many: bool
        ) -> None:
            text = " ".join(statement.split()).upper()
            if text.startswith(_SCHEMA_CHANGES):
                schema_statements.append(text[:80])

        return engine

    storage_module.create_engine = instrumented  # type: ignore[assignment]
    error = None
    began = ended = 0.0
    try:
        storage = SessionStorage(target)
        await _wait_until(start_at)
        began = time.time()
        try:
            await storage.connect()
            manager = SessionManager(storage, inject_time_prefix=False)
            key = f"agent:main:connected-{os.getpid()}"
            await manager.create(key)
            await manager.append_message(key, "user", "after connect")
        except Exception as exc:
            error = _describe(exc)
        finally:
            ended = time.time()
            await storage.close()
    finally:
        storage_module.create_engine = original  # type: ignore[assignment]
    return {
        "pid": os.getpid(),
        "error": error,
        "schema_statements": schema_statements,
        "began": began,
        "ended": ended,
    }


# -- mixed load ----------------------------------------------------------------------------


def mixed_load(
    target: str, worker: int, tasks: int, rounds: int, start_at: float
) -> dict[str, Any]:
    """Several coroutines per process, each creating, appending, updating, saving states,
    reading and branching: many short write transactions from many connections."""
    return asyncio.run(_mixed_load(target, worker, tasks, rounds, start_at))


async def _mixed_load(
    target: str, worker: int, tasks: int, rounds: int, start_at: float
) -> dict[str, Any]:
    errors: list[str] = []
    operations = 0
    async with SessionStorage(target) as storage:
        manager = SessionManager(storage, inject_time_prefix=False)
        await _wait_until(start_at)

        async def task(index: int) -> None:
            nonlocal operations
            key = f"agent:main:mixed-{worker}-{index}"
            try:
                node = await manager.create(key)
                for n in range(rounds):
                    await manager.append_message(key, "user", f"{key}#{n}", token_count=1)
                    await manager.update(key, label=f"round {n}")
                    await manager.save_context_state(
                        SessionContextState(
                            session_id=node.session_id, session_key=key, state_kind="mixed"
                        )
                    )
                    await storage.list_sessions(limit=5)
                    await manager.get_transcript(key)
                    operations += 5
                await manager.branch(key, f"{key}:child", fork_transcript=True)
                await manager.finish(key)
                operations += 3
            except Exception as exc:
                errors.append(_describe(exc))

        await asyncio.gather(*(task(i) for i in range(tasks)))
    return {"pid": os.getpid(), "operations": operations, "errors": errors}


# -- a writer killed mid-transaction -------------------------------------------------------


def hold_write_transaction(target: str, key: str, rows: int, ready: Any) -> None:
    """Open a write unit, write a session and ``rows`` large transcript rows, tell the
    parent (``ready.put``), then block inside the transaction until killed."""
    asyncio.run(_hold_write_transaction(target, key, rows, ready))


async def _hold_write_transaction(target: str, key: str, rows: int, ready: Any) -> None:
    from opensquilla.session.db.repos import sessions as session_repo
    from opensquilla.session.db.repos import transcript as transcript_repo

    storage = SessionStorage(target)
    await storage.connect()
    try:
        async with storage._database.write() as conn:
            node = SessionNode(session_key=key)
            if not await session_repo.insert_new(conn, node):
                raise SessionExistsError(key)
            filler = "x" * 20_000  # large enough to spill pages out of the page cache
            for n in range(rows):
                await transcript_repo.insert(
                    conn,
                    TranscriptEntry(
                        session_id=node.session_id,
                        session_key=key,
                        role="user",
                        content=f"uncommitted {n} {filler}",
                    ),
                )
            ready.put(("ready", os.getpid()))
            time.sleep(600)  # noqa: ASYNC251 - blocks on purpose: the parent kills us here
    except BaseException as exc:
        ready.put(("error", _describe(exc)))
        raise
