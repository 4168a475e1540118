"""The hot writes of a unit of work (``db/uow.py``), each one statement or one hop: the
fenced append, the batch (PostgreSQL: one statement; SQLite: one statement with its BEGIN
and COMMIT in one call on the driver's thread), the pop, and the session state's read and
compare-and-set. While no listener watches the engine's statements each runs on the pool's
DBAPI connection in one greenlet (``db/direct_statement.py``, ``db/direct_units.py``);
otherwise through SQLAlchemy's ``Connection``, so instrumentation and fault injection see
every statement.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, TypeVar, Unpack

from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from ..models import SessionNode, TranscriptEntry
from ..models.usage import CheckedUsage
from .direct_statement import execute_compiled, first_row, plan_for
from .direct_units import (
    all_rows,
    read_then_write,
    returned_or_probed,
    rows_and_keys,
    rows_in_one_hop,
)
from .repos import batch_statements, fenced_append, session_usage, state_rows, transcript_batches
from .repos.fenced_append import Fence
from .repos.states import StoredState
from .rows import models_of_rows
from .statement_watch import statements_watched

if TYPE_CHECKING:
    from .uow import Transaction

T = TypeVar("T")


class DirectWrites:
    """Mixed into :class:`.uow.UnitOfWork`, whose engines, locks and runners it uses."""

    backend: str
    _single: AsyncEngine
    _writer: AsyncEngine
    _one_hop: bool
    _isolation_level: str | None

    if TYPE_CHECKING:

        def one_statement(self) -> AbstractAsyncContextManager[Transaction]: ...

        def write(self) -> AbstractAsyncContextManager[Transaction]: ...

        async def _run_direct(
            self,
            call: Callable[[], Any],
            *,
            on_cancel: Callable[[], None] | None = None,
            cancel_statement: bool = False,
        ) -> Any: ...

        async def _run_statement(self, work: Callable[[Connection], T]) -> T: ...

    async def append_in_one_statement(
        self, entry: TranscriptEntry, *, expected_epoch: int, now: int, token_delta: int
    ) -> tuple[int, int] | None:
        """The fenced append (``fenced_append.append_and_touch``) as one statement in
        autocommit, where :meth:`appends_in_one_statement`: ``(id, created_at)`` of the new
        row as stored, or ``None`` when the fence refused. The checkout, the statement and
        the connection's return cross into SQLAlchemy's greenlet once, not four times
        (``AsyncConnection``'s connect, execute, commit and close each cross): 0.15 ms of
        an append (bench/RESULTS.md). While no listener watches statements (checked at each
        call) the statement runs on the pool's DBAPI connection, without SQLAlchemy's
        ``Connection`` around it."""
        stmt, params = fenced_append.one_statement_append(
            self.backend, entry, expected_epoch=expected_epoch, now=now, token_delta=token_delta
        )
        engine = self._single.sync_engine
        if not statements_watched(engine):
            plan = plan_for(engine, stmt, tuple(params))
            if plan is not None:
                row = await self._run_direct(
                    functools.partial(
                        first_row, engine, plan, params, isolation_level=self._isolation_level
                    )
                )
                if row is None or row[0] is None:
                    await self._check_overflow(entry, expected_epoch, token_delta)
                    return None
                return int(row[0]), int(row[1])
        work = functools.partial(
            fenced_append.run_one_statement,
            statement=stmt,
            params=params,
            entry=entry,
            expected_epoch=expected_epoch,
            token_delta=token_delta,
        )
        return await self._run_statement(work)

    async def update_session_state(
        self,
        key: str,
        next_write: Callable[[tuple[str, StoredState | None] | None], Mapping[str, Any]],
        *,
        tries: int,
    ) -> int | None:
        """:meth:`compare_and_set_state` of ``key``'s session state: ``next_write`` gets
        ``(session_id, stored state or None)`` (``None`` without a session) and returns
        ``session_id``, ``state``, ``revision``, ``now``, ``stored_revision``."""
        return await self.compare_and_set_state(
            state_rows.session_state_row(self.backend, key), next_write, tries=tries
        )

    async def update_scope_state(
        self,
        scope: str,
        scope_id: str,
        next_write: Callable[[StoredState | None], Mapping[str, Any]],
        *,
        tries: int,
    ) -> int | None:
        """:meth:`compare_and_set_state` of ``(scope, scope_id)``'s state: ``next_write``
        gets the stored state (``None`` before the first write) and returns ``state``,
        ``revision``, ``now``, ``stored_revision``."""
        return await self.compare_and_set_state(
            state_rows.scope_state_row(self.backend, scope, scope_id), next_write, tries=tries
        )

    async def compare_and_set_state(
        self,
        row: state_rows.StateRow,
        next_write: Callable[[Any], Mapping[str, Any]],
        *,
        tries: int,
    ) -> int | None:
        """A state row's compare-and-set in autocommit, no transaction: the row read, the
        write ``next_write`` makes of what it found (a conditional statement: ``UPDATE ...
        WHERE revision = <read>``, or the first write's ``INSERT ... ON CONFLICT DO
        NOTHING``), and, when that write found the revision moved, a read again, ``tries``
        times: the new revision, or ``None`` when every try lost its race. What
        ``next_write`` raises propagates, nothing written. With the in-process write lock,
        in one greenlet: on the pool's DBAPI connection while nothing watches statements,
        else through a ``Connection``."""
        engine = self._single.sync_engine
        read = None if statements_watched(engine) else plan_for(engine, row.read, tuple(row.params))
        if read is None:
            return await self._run_statement(
                functools.partial(_compare_and_set_on, row=row, next_write=next_write, tries=tries)
            )

        def decide(found: tuple[Any, ...] | None) -> tuple[Any, Mapping[str, Any], int]:
            write = next_write(row.found(found))
            stmt, params = row.write(**write)
            plan = plan_for(engine, stmt, tuple(params))
            if plan is None:  # pragma: no cover - the store's own statements plan
                raise AssertionError(f"no direct plan for {stmt}")
            return plan, params, int(write["revision"])

        return await self._run_direct(  # type: ignore[no-any-return]
            functools.partial(
                read_then_write,
                engine,
                read,
                row.params,
                decide,
                isolation_level=self._isolation_level,
                tries=tries,
            )
        )

    async def pop_newest(self, key: str) -> tuple[TranscriptEntry | None, bool]:
        """The pop (``transcript_batches.pop_statement``) as one statement in autocommit,
        with the in-process write lock: the entry deleted and whether the generation had a
        live row (``(None, True)``: a concurrent pop took the row this one chose; ``(None,
        False)``: none left, or no session), read on the same connection when the pop
        returned nothing. On the pool's DBAPI connection while nothing watches statements,
        as :meth:`append_in_one_statement`."""
        dialect = self.backend
        params = {"row_key": key}
        engine = self._single.sync_engine
        if not statements_watched(engine):
            plan = plan_for(engine, transcript_batches.pop_statement(dialect), ("row_key",))
            probe = plan_for(engine, transcript_batches.any_live_statement(dialect), ("row_key",))
            if plan is not None and probe is not None:
                rows, keys, live = await self._run_direct(
                    functools.partial(
                        returned_or_probed,
                        engine,
                        plan,
                        probe,
                        params,
                        isolation_level=self._isolation_level,
                    )
                )
                popped = models_of_rows(TranscriptEntry, dialect, rows, keys)
                return (popped[0] if popped else None), live
        async with self.one_statement() as tx:
            entry = await tx.transcript.pop_newest(key)
            return entry, entry is not None or await tx.transcript.has_live(key)

    async def add_usage_in_one_statement(
        self, key: str, *, session_id: str, epoch: int, usage: CheckedUsage, now: int
    ) -> SessionNode | None:
        """The usage increment (``session_usage.usage_statement``, built once per shape) as
        one statement in autocommit, with the in-process write lock: the updated row, or
        ``None`` when the generation moved or a counter has no room (nothing written). On
        the pool's DBAPI connection while nothing watches statements, as
        :meth:`append_in_one_statement`; else through a ``Connection``."""
        stmt, params = session_usage.usage_params(
            self.backend, key, session_id=session_id, epoch=epoch, usage=usage, now=now
        )
        engine = self._single.sync_engine
        plan = None if statements_watched(engine) else plan_for(engine, stmt, tuple(params))
        if plan is not None:
            rows, keys = await self._run_direct(
                functools.partial(
                    rows_and_keys, engine, plan, params, isolation_level=self._isolation_level
                )
            )
            updated = models_of_rows(SessionNode, self.backend, rows, keys)
            return updated[0] if updated else None
        async with self.one_statement() as tx:
            return await tx.sessions.add_usage(
                key, session_id=session_id, epoch=epoch, usage=usage, now=now
            )

    async def append_batch_in_one_statement(
        self, entries: Sequence[TranscriptEntry], **fence: Unpack[Fence]
    ) -> list[tuple[int, int]] | None:
        """PostgreSQL: a batch of up to ``CHUNK_ROWS`` entries of one generation, without
        message ids, as one statement in autocommit (``batch_statements.pg_batch``):
        ``(id, created_at)`` per entry in order, or ``None`` when the fence refused (an
        overflow raised) or the session row changed while the statement waited for it
        (the caller tells them apart, as for one append). On the pool's DBAPI connection
        while nothing watches statements, where a cancellation is passed on to the
        statement (asyncpg asks the server to cancel it: a batch cancelled while it waits
        for the session row writes nothing); else through a ``Connection``."""
        stmt, params = batch_statements.pg_batch(entries, **fence)
        engine = self._single.sync_engine
        plan = None if statements_watched(engine) else plan_for(engine, stmt, tuple(params))
        if plan is not None:
            rows = await self._run_direct(
                functools.partial(
                    all_rows, engine, plan, params, isolation_level=self._isolation_level
                ),
                cancel_statement=True,
            )
        else:
            async with self.one_statement() as tx:
                rows = await tx.transcript.rows_of(stmt, params)
        placed = fenced_append.placed_rows(rows)
        if placed is None:
            await self._check_overflow(entries[0], fence["expected_epoch"], fence["token_delta"])
        return placed

    async def append_view_batch(
        self, entries: Sequence[TranscriptEntry], **fence: Unpack[Fence]
    ) -> list[tuple[int, int]] | None:
        """SQLite with the append view (where :meth:`appends_in_one_statement`): a batch of
        up to ``CHUNK_ROWS`` entries of one generation, without message ids, as one
        statement in a write transaction (``batch_statements.view_batch``): ``(id,
        created_at)`` per entry in order, or ``None`` when the fence refused (an overflow
        raised). While no listener watches statements, on a pool connection of the lean
        adapter: BEGIN, the statement and the COMMIT in one call on the driver's thread
        and one crossing into the greenlet; a cancellation of the caller calls the COMMIT
        off if it comes before the thread reaches it, and the statement is rolled back.
        Otherwise in :meth:`write`, the statement and the COMMIT in one hop."""
        stmt, params = batch_statements.view_batch(entries, **fence)
        engine = self._writer.sync_engine
        if self._one_hop and not statements_watched(engine):
            plan = plan_for(engine, stmt, tuple(params))
            if plan is not None:
                commit: list[Any] = [True, len(entries)]

                def call_off() -> None:
                    commit[0] = False

                rows = await self._run_direct(
                    functools.partial(
                        rows_in_one_hop,
                        engine,
                        plan,
                        params,
                        begin="BEGIN IMMEDIATE",
                        commit=commit,
                    ),
                    on_cancel=call_off,
                )
                placed = batch_statements.view_placed(rows, len(entries))
                if placed is None:
                    await self._check_overflow(
                        entries[0], fence["expected_epoch"], fence["token_delta"]
                    )
                return placed
        async with self.write() as tx:
            return await tx.transcript.append_batch(
                entries, **fence, returning=True, ends_transaction=True, through_view=True
            )

    async def _check_overflow(
        self, entry: TranscriptEntry, expected_epoch: int, token_delta: int
    ) -> None:
        """After a refused one-statement append of ``token_delta`` tokens: raise when the
        generation has no room for them (``fenced_append.check_overflow``); nothing for a
        delta of 0."""
        if token_delta:
            checked = functools.partial(
                fenced_append.check_overflow,
                entry=entry,
                expected_epoch=expected_epoch,
                token_delta=token_delta,
            )
            await self._run_statement(checked)


def _compare_and_set_on(
    conn: Connection,
    *,
    row: state_rows.StateRow,
    next_write: Callable[[Any], Mapping[str, Any]],
    tries: int,
) -> int | None:
    """:meth:`DirectWrites.compare_and_set_state` through ``conn`` (a listener watches the
    statements): the same statements, their values as the driver returns them."""
    for _ in range(tries):
        found = execute_compiled(conn, row.read, row.params).first()
        write = next_write(row.found(tuple(found) if found is not None else None))
        stmt, params = row.write(**write)
        if execute_compiled(conn, stmt, params).rowcount:
            return int(write["revision"])
    return None
