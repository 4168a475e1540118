"""Code that runs in separate worker processes (``multiprocessing`` with ``spawn``).

Each public function is a top-level, picklable entry point: it runs ``asyncio.run`` on its
own storage (its own engine and connection pool) and returns plain data, so a parent test
can check what every process believed happened against what the database holds. Workers
never raise for an expected refusal; they record it, together with anything unexpected,
so the parent sees every error instead of the first one.

Races are never left to timing. Workers meet at barriers and wait for events that the
parent test creates on a ``multiprocessing`` manager (the ``sync_manager`` fixture), or
poll the database until the other side's progress shows, so the interleaving a test claims
is the one that runs however busy the machine is. Every such wait is bounded by
``HANG_GUARD``: a side that never arrives is an error the parent sees, not a hang. A
worker that fails breaks the barriers it shares, so the others stop waiting at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import sqlalchemy as sa
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
from opensquilla.session.support.clock import now_ms
from opensquilla.session.usecases import retention

from .support import HANG_GUARD

ARCHIVE_DIR_ENV = "OPENSQUILLA_SESSION_ARCHIVE_DIR"
# The racing compactors summarise at the same time on purpose, to exercise the commit's
# checks: without the cross-process lease, which would make them take turns.
UNLEASED = CompactionConfig(lease_seconds=0)


class RendezvousError(RuntimeError):
    """Another side of a race never arrived (it failed, or hung) within ``HANG_GUARD``."""


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


async def _pass(gate: Any, what: str) -> None:
    """Wait at a manager ``Barrier`` or for a manager ``Event``, off the event loop."""
    try:
        passed = await asyncio.to_thread(gate.wait, HANG_GUARD)
    except threading.BrokenBarrierError:
        raise RendezvousError(
            f"{what}: the barrier broke (another process failed or did not come)"
        ) from None
    if passed is False:  # an event not set in time (a barrier returns its arrival index)
        raise RendezvousError(f"{what}: not signalled within {HANG_GUARD:.0f} s")


async def _until(check: Callable[[], Awaitable[bool]], what: str) -> None:
    """Poll ``check`` (a database read) until it holds; an error after ``HANG_GUARD``."""
    deadline = time.monotonic() + HANG_GUARD
    while not await check():
        if time.monotonic() > deadline:
            raise RendezvousError(f"gave up after {HANG_GUARD:.0f} s waiting for {what}")
        await asyncio.sleep(0.01)


async def _past_millisecond(stamp: int) -> int:
    """The wall clock in milliseconds (as the store stamps rows) once it is past ``stamp``."""
    while True:
        now = now_ms()
        if now > stamp:
            return now
        await asyncio.sleep(0.001)


def _abort(*gates: Any) -> None:
    """Break shared barriers (events have nothing to break) so nobody waits for us."""
    for gate in gates:
        with contextlib.suppress(Exception):
            gate.abort()


async def _scalar(storage: SessionStorage, query: str, **params: Any) -> Any:
    async with storage.engine.connect() as conn:
        return (await conn.execute(sa.text(query), params)).scalar_one()


def warm(started: Any) -> int:
    """Boot the interpreter and import the package, then wait at the barrier ``started``
    until every worker of the pool has done the same: no worker can take two warm-ups,
    so all of them are started."""
    started.wait(HANG_GUARD)
    return os.getpid()


# -- appends -------------------------------------------------------------------------------


def append_writer(
    target: str,
    key: str,
    writer: int,
    count: int,
    gates: Mapping[int, Sequence[Any]],
    tokens: int = 0,
    finished: Any = None,
) -> dict[str, Any]:
    """Append ``count`` messages ``w<writer>-<n>`` one after the other. Before append
    ``n`` it passes every barrier or event in ``gates[n]``; it sets the event ``finished``
    (if given) when it is done. ``first``/``last`` (``time.monotonic``) span the appends."""
    return asyncio.run(_append_writer(target, key, writer, count, gates, tokens, finished))


async def _append_writer(
    target: str,
    key: str,
    writer: int,
    count: int,
    gates: Mapping[int, Sequence[Any]],
    tokens: int,
    finished: Any,
) -> dict[str, Any]:
    done: list[tuple[str, int | None, str]] = []
    errors: list[str] = []
    first = last = 0.0
    try:
        async with SessionStorage(target) as storage:
            manager = SessionManager(storage, inject_time_prefix=False)
            for n in range(count):
                for gate in gates.get(n, ()):
                    await _pass(gate, f"writer {writer} before append {n}")
                if n == 0:
                    first = time.monotonic()
                content = f"w{writer}-{n:03d}"
                try:
                    entry = await manager.append_message(
                        key, "user", content, token_count=tokens or writer + 1
                    )
                except Exception as exc:
                    errors.append(_describe(exc))
                    continue
                done.append((content, entry.id, entry.session_id))
            last = time.monotonic()
    except Exception as exc:
        errors.append(_describe(exc))
        _abort(*(gate for group in gates.values() for gate in group))
    finally:
        if finished is not None:
            finished.set()
    return {"pid": os.getpid(), "done": done, "errors": errors, "first": first, "last": last}


def fenced_appender(
    target: str, key: str, writer: int, count: int, per_generation: int
) -> dict[str, Any]:
    """Append while another process resets the key: each append lands or is refused as
    stale; ``outcomes`` says which, with the generation and message id it landed in.

    Append ``n`` waits until the key has been reset ``n // per_generation`` times, so the
    appends cannot all be over before the resets begin; in between they run freely."""
    return asyncio.run(_fenced_appender(target, key, writer, count, per_generation))


async def _fenced_appender(
    target: str, key: str, writer: int, count: int, per_generation: int
) -> dict[str, Any]:
    outcomes: list[dict[str, Any]] = []
    errors: list[str] = []
    try:
        async with SessionStorage(target) as storage:
            manager = SessionManager(storage, inject_time_prefix=False)
            for n in range(count):
                resets = n // per_generation

                async def reset_enough(resets: int = resets) -> bool:
                    node = await storage.get_session(key)
                    return node is not None and node.epoch >= resets

                await _until(reset_enough, f"reset {resets} of {key}")
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
    except Exception as exc:
        errors.append(_describe(exc))
    return {"pid": os.getpid(), "outcomes": outcomes, "errors": errors}


def resetter(
    target: str, key: str, resets: int, appenders: int, landed: int, archive_dir: str
) -> dict[str, Any]:
    """``apply_intent(key, RESET_SAME_KEY)`` ``resets`` times, each once every one of the
    ``appenders`` has ``landed`` messages in the current generation (read from the
    database), so every reset cuts into appends under way. ``generations`` lists the
    session id each reset started."""
    os.environ[ARCHIVE_DIR_ENV] = archive_dir
    return asyncio.run(_resetter(target, key, resets, appenders, landed))


async def _resetter(
    target: str, key: str, resets: int, appenders: int, landed: int
) -> dict[str, Any]:
    generations: list[str] = []
    errors: list[str] = []
    try:
        async with SessionStorage(target) as storage:
            manager = SessionManager(storage, inject_time_prefix=False)

            async def every_appender_landed() -> bool:
                live = await manager.get_transcript(key)  # the current generation only
                per_writer = Counter((entry.content or "").split("-")[0] for entry in live)
                return all(per_writer[f"f{n}"] >= landed for n in range(appenders))

            for number in range(1, resets + 1):
                await _until(every_appender_landed, f"appends before reset {number}")
                try:
                    node, rotated = await manager.apply_intent(key, SessionIntent.RESET_SAME_KEY)
                except Exception as exc:
                    errors.append(_describe(exc))
                    continue
                if not rotated:
                    errors.append("apply_intent(RESET_SAME_KEY) did not rotate")
                generations.append(node.session_id)
    except Exception as exc:
        errors.append(_describe(exc))
    return {"pid": os.getpid(), "generations": generations, "errors": errors}


# -- get_or_create -------------------------------------------------------------------------


def get_or_create_caller(
    target: str, keys: Sequence[str], start: Any, collide: Any, colliding: Sequence[str]
) -> dict[str, Any]:
    """``get_or_create`` each key in turn; every process passes the barrier ``start`` before
    each key, so all ask for it together. For the keys in ``colliding`` every process also
    waits at the barrier ``collide`` just before its insert: all of them have then read
    "no such row", so all of them try to insert it. ``attempts`` counts this process's
    inserts per key, so the parent can tell whether two processes really raced for one."""
    return asyncio.run(_get_or_create_caller(target, list(keys), start, collide, set(colliding)))


async def _get_or_create_caller(
    target: str, keys: list[str], start: Any, collide: Any, colliding: set[str]
) -> dict[str, Any]:
    created: dict[str, bool] = {}
    session_ids: dict[str, str] = {}
    attempts: dict[str, int] = {}
    errors: list[str] = []
    try:
        async with SessionStorage(target) as storage:
            # The manager's get_or_create inserts through the session-row use case (this
            # worker process's own module, patched for its life).
            from opensquilla.session.usecases import sessions as session_rows

            insert = session_rows.create

            async def counted_insert(uow: Any, node: SessionNode) -> bool:
                attempts[node.session_key] = attempts.get(node.session_key, 0) + 1
                if node.session_key in colliding and attempts[node.session_key] == 1:
                    await _pass(collide, f"insert of {node.session_key}")
                return await insert(uow, node)

            session_rows.create = counted_insert
            manager = SessionManager(storage, inject_time_prefix=False)
            for key in keys:
                await _pass(start, f"start of {key}")
                try:
                    node, was_created = await manager.get_or_create(key)
                except RendezvousError:
                    raise
                except Exception as exc:
                    errors.append(_describe(exc))
                    _abort(collide)  # the others may be waiting for our insert
                    continue
                created[key] = was_created
                session_ids[key] = node.session_id
    except Exception as exc:
        errors.append(_describe(exc))
        _abort(start, collide)
    return {
        "pid": os.getpid(),
        "created": created,
        "session_ids": session_ids,
        "attempts": attempts,
        "errors": errors,
    }


# -- compaction ----------------------------------------------------------------------------


class HookedSummarizer:
    """The fallback summary; the first chunk first awaits ``hook``, which holds the
    compaction between its read of the transcript and its commit."""

    source = "fallback"

    def __init__(self, hook: Callable[[], Awaitable[None]]) -> None:
        self._hook = hook
        self._inner = FallbackSummarizer()
        self.calls = 0

    async def summarize(
        self,
        chunk: Sequence[Mapping[str, Any]],
        *,
        config: CompactionConfig,
        custom_instructions: str | None,
    ) -> str | None:
        self.calls += 1
        if self.calls == 1:
            await self._hook()
        return await self._inner.summarize(
            chunk, config=config, custom_instructions=custom_instructions
        )


def _compaction_record(compaction_id: str, result: Any, held: bool) -> dict[str, Any]:
    return {
        "compaction_id": compaction_id,
        "committed": result.removed_count > 0 and result.skip_reason is None,
        "removed": result.removed_count,
        "skip_reason": result.skip_reason,
        "held": held,
    }


def racing_compactor(
    target: str,
    key: str,
    worker: int,
    window: int,
    summarising: Sequence[Any],
    writers_finished: Sequence[Any],
    pause: float,
) -> dict[str, Any]:
    """Compact ``key`` again and again while ``append_writer`` processes write to it.

    The first compaction that gets to summarise is held there: it sets the event
    ``summarising[worker]`` and waits until the database shows an append that landed
    after its read, so it is overtaken (it is reported with ``held``; the appended rows
    stay live, and of the held compactions the first to commit wins). The writers
    wait for every event in ``summarising`` before their second half, so the hold cannot
    outlast them; and no compactor goes on before every compactor has been held, so none
    can commit (and leave the others nothing to summarise) first. The rounds after that
    race freely. Once every event in ``writers_finished`` is set, one more round runs and
    the worker stops: a compaction that reads after the last append must commit, unless
    another one changed the transcript (committed) meanwhile."""
    return asyncio.run(
        _racing_compactor(target, key, worker, window, summarising, writers_finished, pause)
    )


async def _racing_compactor(
    target: str,
    key: str,
    worker: int,
    window: int,
    summarising: Sequence[Any],
    writers_finished: Sequence[Any],
    pause: float,
) -> dict[str, Any]:
    results: list[dict[str, Any]] = []
    errors: list[str] = []
    written_query = (
        "SELECT (SELECT COUNT(*) FROM transcript_entries"
        "        WHERE session_key = :key AND content LIKE 'w%')"
        "     + (SELECT COUNT(*) FROM compacted_transcript_entries"
        "        WHERE session_key = :key AND content LIKE 'w%')"
    )
    try:
        async with SessionStorage(target) as storage:
            manager = SessionManager(storage, inject_time_prefix=False)
            held_once = False
            progress, progressed = -1, time.monotonic()
            index = 0
            while True:
                last_round = all(flag.is_set() for flag in writers_finished)
                hold = False

                async def hold_until_overtaken() -> None:
                    nonlocal held_once, hold
                    if held_once:
                        await asyncio.sleep(pause)  # a free round: just widen the window
                        return
                    held_once = hold = True
                    # Rows are counted across the live and compacted tables, so only an
                    # append (never a compaction moving rows) makes the count grow.
                    before = await _scalar(storage, written_query, key=key)
                    summarising[worker].set()

                    async def appended() -> bool:
                        return await _scalar(storage, written_query, key=key) > before

                    await _until(appended, "an append during the held summary")
                    for other, flag in enumerate(summarising):
                        await _pass(flag, f"compactor {other} held")

                compaction_id = f"cmp-{worker}-{index}"
                index += 1
                result = await manager.compact_with_result(
                    key,
                    window,
                    UNLEASED,
                    compaction_id=compaction_id,
                    summarizer=HookedSummarizer(hold_until_overtaken),
                )
                results.append(_compaction_record(compaction_id, result, hold))
                if last_round:
                    break
                written = await _scalar(storage, written_query, key=key)
                if written != progress:
                    progress, progressed = written, time.monotonic()
                elif time.monotonic() - progressed > HANG_GUARD:
                    raise RendezvousError(f"the writers made no progress in {HANG_GUARD:.0f} s")
                await asyncio.sleep(pause)
    except Exception as exc:
        errors.append(_describe(exc))
        summarising[worker].set()  # release the writers: the error fails the test anyway
    return {"pid": os.getpid(), "results": results, "errors": errors}


def rendezvous_compactor(
    target: str, key: str, worker: int, window: int, both_summarising: Any
) -> dict[str, Any]:
    """One compaction whose summariser first waits at the barrier ``both_summarising``:
    every process passes it only once all have read the transcript, before any commits."""
    return asyncio.run(_rendezvous_compactor(target, key, worker, window, both_summarising))


async def _rendezvous_compactor(
    target: str, key: str, worker: int, window: int, both_summarising: Any
) -> dict[str, Any]:
    results: list[dict[str, Any]] = []
    errors: list[str] = []
    try:
        async with SessionStorage(target) as storage:
            manager = SessionManager(storage, inject_time_prefix=False)
            summarizer = HookedSummarizer(
                lambda: _pass(both_summarising, f"compactor {worker} summarising")
            )
            compaction_id = f"cmp-{worker}-0"
            result = await manager.compact_with_result(
                key, window, UNLEASED, compaction_id=compaction_id, summarizer=summarizer
            )
            results.append(_compaction_record(compaction_id, result, True))
            if summarizer.calls == 0:
                errors.append(f"compactor {worker} never summarised")
    except Exception as exc:
        errors.append(_describe(exc))
        _abort(both_summarising)
    return {"pid": os.getpid(), "results": results, "errors": errors}


# -- retention racing appends and branches -------------------------------------------------


def churn_writer(
    target: str,
    prefix: str,
    worker: int,
    sessions: int,
    appends: int,
    deleted: Any,
    finished: Any,
) -> dict[str, Any]:
    """Create sessions, append to them and fork them (full fork) while retention deletes;
    set the event ``finished`` when done.

    It writes at least ``sessions`` sessions and goes on until it has written one that it
    started after the event ``deleted`` was set (retention has deleted while it wrote), so
    the writing always outlasts a deletion. ``acked`` lists every append this process saw
    commit, with the generation it landed in; ``forks`` every child it saw created, with
    the parent contents it must hold; ``first``/``last`` (``time.monotonic``) span it all.
    """
    try:
        return asyncio.run(_churn_writer(target, prefix, worker, sessions, appends, deleted))
    finally:
        finished.set()


async def _churn_writer(
    target: str, prefix: str, worker: int, sessions: int, appends: int, deleted: Any
) -> dict[str, Any]:
    acked: list[dict[str, Any]] = []
    forks: list[dict[str, Any]] = []
    refused: list[str] = []
    errors: list[str] = []
    first = last = 0.0
    written_after_deletion = 0
    number = 0
    try:
        async with SessionStorage(target) as storage:
            manager = SessionManager(storage, inject_time_prefix=False)
            waiting_since: float | None = None
            first = time.monotonic()
            while number < sessions or not written_after_deletion:
                if number >= sessions:  # only waiting for the deletion now
                    waiting_since = waiting_since or time.monotonic()
                    if time.monotonic() - waiting_since > HANG_GUARD:
                        raise RendezvousError(
                            f"no deletion was signalled within {HANG_GUARD:.0f} s "
                            f"(after {number} sessions)"
                        )
                after_deletion = await asyncio.to_thread(deleted.is_set)
                await _churn_session(
                    manager, f"{prefix}:w{worker}:s{number:03d}", appends, acked, forks, refused
                )
                written_after_deletion += after_deletion
                number += 1
            last = time.monotonic()
    except Exception as exc:
        errors.append(_describe(exc))
    return {
        "pid": os.getpid(),
        "acked": acked,
        "forks": forks,
        "refused": refused,
        "errors": errors,
        "sessions": number,
        "written_after_deletion": written_after_deletion,
        "first": first,
        "last": last,
    }


async def _churn_session(
    manager: SessionManager,
    key: str,
    appends: int,
    acked: list[dict[str, Any]],
    forks: list[dict[str, Any]],
    refused: list[str],
) -> None:
    node, _ = await manager.get_or_create(key)
    written: list[str] = []
    for n in range(appends):
        content = f"{key}#{n}"
        try:
            entry = await manager.append_message(key, "user", content, token_count=1)
        except (SessionNotFoundError, StaleEpochError) as exc:
            refused.append(_describe(exc))  # retention deleted the session meanwhile
            return
        if entry.session_id != node.session_id:
            # Deleted and re-created by another path: not expected in this test.
            raise AssertionError(f"append to {key} landed in an unknown generation")
        written.append(content)
        acked.append({"key": key, "session_id": entry.session_id, "content": content})
    child_key = f"{key}:child"
    try:
        child = await manager.branch(key, child_key, fork_transcript=True)
    except SessionNotFoundError as exc:
        refused.append(_describe(exc))
        return
    if child.forked_from_parent:
        forks.append(
            {
                "key": child_key,
                "session_id": child.session_id,
                "parent_session_id": node.session_id,
                "contents": written,
            }
        )


def retention_runner(
    target: str,
    prefix: str,
    writers: int,
    finished_each: int,
    cap: int,
    deleted: Any,
    writers_finished: Sequence[Any],
    pause: float,
) -> dict[str, Any]:
    """Prune and cap while ``churn_writer`` processes write, until all of them finish.

    It starts once the database shows that every writer has forked ``finished_each``
    sessions, and takes that moment as the prune cut-off: ``prune_stale`` deletes what was
    last touched before it (those sessions for sure, and any session under way that no
    append has touched since), ``cap_entries(cap)`` the least recently updated sessions
    beyond ``cap``. Once both have deleted something it sets the event ``deleted``, which
    the writers wait for before they stop. ``deletion_times`` are ``time.monotonic``."""
    return asyncio.run(
        _retention_runner(
            target, prefix, writers, finished_each, cap, deleted, writers_finished, pause
        )
    )


async def _retention_runner(
    target: str,
    prefix: str,
    writers: int,
    finished_each: int,
    cap: int,
    deleted: Any,
    writers_finished: Sequence[Any],
    pause: float,
) -> dict[str, Any]:
    capped = pruned = 0
    deletion_times: list[float] = []
    errors: list[str] = []
    try:
        async with SessionStorage(target) as storage:
            manager = SessionManager(storage, inject_time_prefix=False)

            async def writers_under_way() -> bool:
                for n in range(writers):
                    forked = await _scalar(
                        storage,
                        "SELECT COUNT(*) FROM sessions WHERE session_key LIKE :pattern",
                        pattern=f"{prefix}:w{n}:%:child",
                    )
                    if forked < finished_each:
                        return False
                return True

            await _until(writers_under_way, f"every writer to fork {finished_each} sessions")
            # Everything seen so far is strictly older than the cut-off, and everything
            # written from now on is not.
            cutoff = await _past_millisecond(now_ms())
            signalled: float | None = None
            while not all(flag.is_set() for flag in writers_finished):
                # The writers stop on their own if no deletion is ever signalled; once it is,
                # each has at most a few sessions left to write.
                if signalled is not None and time.monotonic() - signalled > HANG_GUARD:
                    raise RendezvousError("the writers never finished after the deletions")
                # The cut-off is fixed (what manager.prune_stale computes from an age would
                # drift with the clock): a session touched after it is never pruned.
                pruned_now = await retention.prune_stale(storage.uow, cutoff)
                capped_now = await manager.cap_entries(cap)
                pruned += pruned_now
                capped += capped_now
                if pruned_now or capped_now:
                    deletion_times.append(time.monotonic())
                if pruned and capped and signalled is None:
                    deleted.set()
                    signalled = time.monotonic()
                await asyncio.sleep(pause)
    except Exception as exc:
        errors.append(_describe(exc))
        deleted.set()  # release the writers: the error fails the test anyway
    return {
        "pid": os.getpid(),
        "capped": capped,
        "pruned": pruned,
        "deletion_times": deletion_times,
        "errors": errors,
    }


# -- connect / migrate ---------------------------------------------------------------------

_SCHEMA_CHANGES = ("CREATE ", "ALTER ", "DROP ", "INSERT INTO ALEMBIC_VERSION")


def connect_worker(target: str, start: Any, contend: Any) -> dict[str, Any]:
    """``connect()`` (which migrates); counts the schema statements this process ran, so
    the parent can tell that exactly one process migrated.

    Every process passes the barrier ``start`` just before ``connect()``, and the barrier
    ``contend`` when ``connect()`` has found the schema behind and is about to take the
    migration lock: all of them then contend for the lock, none of them having migrated.
    ``upgrades`` counts how often this process got there."""
    return asyncio.run(_connect_worker(target, start, contend))


async def _connect_worker(target: str, start: Any, contend: Any) -> dict[str, Any]:
    from opensquilla.session.db import lifecycle as storage_module
    from opensquilla.session.db import migrate as migrate_module

    schema_statements: list[str] = []
    original_engine = storage_module.create_engine
    original_upgrade = migrate_module.upgrade
    upgrades = 0

    def instrumented(*args: Any, **kwargs: Any) -> Any:
        engine = original_engine(*args, **kwargs)

        @event.listens_for(engine.sync_engine, "before_cursor_execute")
        def _count(
            conn: Any, cursor: Any, statement: str, params: Any, context: Any, many: bool
        ) -> None:
            text = " ".join(statement.split()).upper()
            if text.startswith(_SCHEMA_CHANGES):
                schema_statements.append(text[:80])

        return engine

    async def contended_upgrade(engine: Any, revision: str = "head", layout: Any = None) -> None:
        nonlocal upgrades
        upgrades += 1
        if upgrades == 1:
            await _pass(contend, "every process about to take the migration lock")
        await original_upgrade(engine, revision, layout=layout)

    storage_module.create_engine = instrumented  # type: ignore[assignment]
    migrate_module.upgrade = contended_upgrade  # type: ignore[assignment]
    error = None
    began = ended = 0.0
    try:
        storage = SessionStorage(target)
        try:
            await _pass(start, "every process about to connect")
            began = time.monotonic()
            await storage.connect()
            manager = SessionManager(storage, inject_time_prefix=False)
            key = f"agent:main:connected-{os.getpid()}"
            await manager.create(key)
            await manager.append_message(key, "user", "after connect")
        except Exception as exc:
            error = _describe(exc)
            _abort(start, contend)
        finally:
            ended = time.monotonic()
            await storage.close()
    finally:
        storage_module.create_engine = original_engine  # type: ignore[assignment]
        migrate_module.upgrade = original_upgrade  # type: ignore[assignment]
    return {
        "pid": os.getpid(),
        "error": error,
        "schema_statements": schema_statements,
        "upgrades": upgrades,
        "began": began,
        "ended": ended,
    }


# -- mixed load ----------------------------------------------------------------------------


def mixed_load(
    target: str, worker: int, tasks: int, rounds: int, start: Any, middle: Any
) -> dict[str, Any]:
    """Several coroutines per process, each creating, appending, updating, saving states,
    reading and branching: many short write transactions from many connections.

    Every process passes the barrier ``start`` once connected, and every coroutine of every
    process meets at the barrier ``middle`` halfway through its rounds, so all of them are
    busy at once (``first``/``last``, ``time.monotonic``, span the work)."""
    return asyncio.run(_mixed_load(target, worker, tasks, rounds, start, middle))


async def _mixed_load(
    target: str, worker: int, tasks: int, rounds: int, start: Any, middle: Any
) -> dict[str, Any]:
    errors: list[str] = []
    operations = 0
    first = last = 0.0
    try:
        async with SessionStorage(target) as storage:
            manager = SessionManager(storage, inject_time_prefix=False)
            await _pass(start, f"process {worker} connected")
            first = time.monotonic()

            async def task(index: int) -> None:
                nonlocal operations
                key = f"agent:main:mixed-{worker}-{index}"
                try:
                    node = await manager.create(key)
                    for n in range(rounds):
                        if n == rounds // 2:
                            await _pass(middle, f"{key} halfway")
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
                    _abort(middle)

            await asyncio.gather(*(task(i) for i in range(tasks)))
            last = time.monotonic()
    except Exception as exc:
        errors.append(_describe(exc))
        _abort(start, middle)
    return {
        "pid": os.getpid(),
        "operations": operations,
        "errors": errors,
        "first": first,
        "last": last,
    }


# -- a writer killed mid-transaction -------------------------------------------------------


def hold_write_transaction(target: str, key: str, rows: int, ready: Any) -> None:
    """Open a write unit, write a session and ``rows`` large transcript rows, tell the
    parent (``ready.put``), then block inside the transaction until killed."""
    asyncio.run(_hold_write_transaction(target, key, rows, ready))


async def _hold_write_transaction(target: str, key: str, rows: int, ready: Any) -> None:
    storage = SessionStorage(target)
    await storage.connect()
    try:
        async with storage.uow.write() as tx:
            node = SessionNode(session_key=key)
            if not await tx.sessions.insert_new(node):
                raise SessionExistsError(key)
            filler = "x" * 20_000  # large enough to spill pages out of the page cache
            for n in range(rows):
                await tx.transcript.insert(
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
