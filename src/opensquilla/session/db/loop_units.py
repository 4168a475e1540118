"""One unit-of-work factory, and one engine (pool), per event loop (docs/sync.md#loops).

asyncpg's connections belong to the loop that opened them, and the locks and the pool's
waiting of a unit of work to the loop that first waits on them; so a store on a file or a
PostgreSQL DSN gives each event loop that calls it a :class:`UnitOfWork` of its own over an
engine of its own, made on the loop's first call (the schema was brought to head once, by
``connect()``). ``:memory:`` (one pinned connection) and an application's engine keep one
loop: a call from another gets ``EventLoopMismatchError``.

An engine goes when its loop ends: the loop's ``shutdown_asyncgens()`` (which
``asyncio.run`` and ``asyncio.Runner`` call before they close it) closes a tiny async
generator started on that loop for it, whose ``finally`` disposes of the engine there, its
connections closed on their own loop. A loop closed without that step is seen at the next
call from a new loop (or at ``close()``): its engine is disposed on a short-lived thread of
its own (SQLite's connections close from any loop; asyncpg's cannot be closed any more and
are let go of). ``close()`` disposes of every engine still open, from any loop. So the
engines open are at most one per live loop, plus those of loops that closed without
``shutdown_asyncgens()`` since a new loop last arrived.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncEngine

from .uow import UnitOfWork

log = logging.getLogger("opensquilla.session.storage")

_running_loop = asyncio.get_running_loop
Dispose = Callable[[AsyncEngine, asyncio.AbstractEventLoop | None], Awaitable[None]]


@dataclass(eq=False)
class _Bound:
    """A loop's unit of work and the generator that disposes of its engine at loop end."""

    unit: UnitOfWork
    watcher: AsyncGenerator[None, None] | None = None
    retired: bool = False


class LoopUnits:
    """The units of work of one store, by event loop (see the module's docstring)."""

    def __init__(
        self,
        first: UnitOfWork,
        *,
        new_engine: Callable[[], AsyncEngine] | None,
        dispose: Dispose,
    ) -> None:
        self._first = first
        self._new_engine = new_engine  # None: one loop only (:memory:, an application's engine)
        self._dispose = dispose
        self._lock = threading.Lock()
        self._units: dict[asyncio.AbstractEventLoop, _Bound] = {first.loop: _Bound(first)}
        self._newest = first
        self._reapers: list[threading.Thread] = []
        self._closed = False
        if new_engine is not None:
            self._watch(self._units[first.loop])

    @property
    def engines(self) -> int:
        """How many engines are open now (those of live loops, and of closed loops not yet
        seen): what ``close()`` would dispose of."""
        return len(self._units)

    def current(self) -> UnitOfWork:
        """The unit of work of the running loop, made on its first call; outside any loop
        the newest one (whose engine names the database)."""
        try:
            loop = _running_loop()
        except RuntimeError:
            return self._newest
        bound = self._units.get(loop)
        if bound is not None:
            return bound.unit
        if self._new_engine is None:
            return self._first  # its loop check refuses the call, saying why
        return self._add(loop)

    def _add(self, loop: asyncio.AbstractEventLoop) -> UnitOfWork:
        assert self._new_engine is not None
        with self._lock:
            bound = self._units.get(loop)
            if bound is not None:
                return bound.unit
            if self._closed:  # close() ran meanwhile, on another thread
                from .lifecycle import StorageNotConnectedError

                raise StorageNotConnectedError("Storage not connected. Call connect() first.")
            dead = [b for seen, b in self._units.items() if seen.is_closed()]
            for gone in dead:
                del self._units[gone.unit.loop]
                gone.retired = True
            unit = UnitOfWork(
                self._new_engine(), self._first.target, append_view=self._newest.append_view
            )
            bound = _Bound(unit)
            self._units[loop] = bound
            self._newest = unit
        self._watch(bound)
        for gone in dead:
            self._reap(gone)
        return unit

    # -- the end of a loop ------------------------------------------------------------

    def _watch(self, bound: _Bound) -> None:
        """Start, on the running loop, the async generator whose ``finally`` disposes of
        ``bound``'s engine when the loop shuts its async generators down. It is advanced
        to its first ``yield`` here, synchronously: the loop's first-iteration hook
        records it then, and it awaits nothing before that ``yield``."""
        watcher = self._at_loop_end(bound)
        bound.watcher = watcher
        step = watcher.asend(None)
        try:
            step.send(None)
        except StopIteration:
            return
        raise RuntimeError("the loop-end watcher did not stop at its first yield")

    async def _at_loop_end(self, bound: _Bound) -> AsyncGenerator[None, None]:
        try:
            yield
        finally:
            with self._lock:
                mine = not bound.retired
                bound.retired = True
                if mine and self._units.get(bound.unit.loop) is bound:
                    del self._units[bound.unit.loop]
            if mine:
                await self._dispose_quietly(bound.unit.engine, bound.unit.loop)

    @staticmethod
    def _silence(bound: _Bound) -> None:
        """End ``bound``'s watcher (already retired: its ``finally`` does nothing), so that
        it is never finalised later on a loop that has gone."""
        watcher, bound.watcher = bound.watcher, None
        if watcher is None:
            return
        step = watcher.aclose()
        try:
            step.send(None)
        except StopIteration:
            pass
        except (RuntimeError, ValueError):  # being closed by its loop right now
            step.close()

    def _reap(self, bound: _Bound) -> None:
        """Dispose of the engine of a loop that closed without shutting its async
        generators down, on a thread and loop of its own (never blocking this loop);
        ``close()`` waits for it."""
        self._silence(bound)
        engine, loop = bound.unit.engine, bound.unit.loop

        reaper = threading.Thread(
            target=asyncio.run,
            args=(self._dispose_quietly(engine, loop),),
            name="opensquilla-session-reaper",
            daemon=True,
        )
        with self._lock:
            self._reapers = [t for t in self._reapers if t.is_alive()]
            self._reapers.append(reaper)
        reaper.start()

    async def _dispose_quietly(
        self, engine: AsyncEngine, loop: asyncio.AbstractEventLoop | None
    ) -> None:
        """Dispose of ``engine``; a failure is logged (at a loop's end, nobody awaits it)."""
        try:
            await self._dispose(engine, loop)
        except Exception:
            log.warning(
                "could not dispose of the engine of a closed event loop",
                exc_info=True,
                extra={"operation": "close"},
            )

    # -- close --------------------------------------------------------------------------

    async def close(self) -> None:
        """Dispose of every engine still open (from any loop: ``dispose_engine`` hands an
        engine of another live loop to that loop), and wait for those being disposed."""
        with self._lock:
            self._closed = True
            bounds = list(self._units.values())
            self._units.clear()
            for bound in bounds:
                bound.retired = True
            reapers, self._reapers = self._reapers, []
        failure: BaseException | None = None
        for bound in bounds:
            self._silence(bound)
            try:
                await self._dispose(bound.unit.engine, bound.unit.loop)
            except BaseException as exc:  # the others are disposed of all the same
                failure = failure or exc
        for reaper in reapers:
            await asyncio.to_thread(reaper.join)
        if failure is not None:
            raise failure
