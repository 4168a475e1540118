"""``uow_slots.not_interrupted``: a statement a cancellation lets finish. Each test forces
the interleaving it claims: the statement waits on an event the test sets, and the caller
is cancelled while it waits."""

from __future__ import annotations

import asyncio
import gc
from typing import Any

import pytest

from opensquilla.session.db.uow_slots import not_interrupted


class Statement:
    """A statement that waits for ``release`` and records how it ended."""

    def __init__(self, outcome: Any = "written") -> None:
        self.started = asyncio.Event()
        self.release = asyncio.Event()
        self.outcome = outcome
        self.ended: str | None = None

    async def run(self) -> Any:
        self.started.set()
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.ended = "cancelled"
            raise
        self.ended = "finished"
        if isinstance(self.outcome, BaseException):
            raise self.outcome
        return self.outcome


async def test_it_returns_the_statement_s_value_and_raises_its_error() -> None:
    done = Statement()
    done.release.set()
    assert await not_interrupted(done.run()) == "written"
    failing = Statement(ValueError("refused"))
    failing.release.set()
    with pytest.raises(ValueError, match="refused"):
        await not_interrupted(failing.run())


async def test_a_cancelled_caller_waits_for_the_statement_then_gets_its_cancellation() -> None:
    statement = Statement()
    calls: list[str] = []
    caller = asyncio.create_task(not_interrupted(statement.run(), lambda: calls.append("off")))
    await statement.started.wait()
    caller.cancel()
    assert calls == ["off"]  # called when the cancellation arrives, before the statement ends
    caller.cancel()  # a second cancellation changes nothing
    for _ in range(5):
        await asyncio.sleep(0)
    assert not caller.done() and statement.ended is None
    statement.release.set()
    with pytest.raises(asyncio.CancelledError):
        await caller
    assert statement.ended == "finished"
    assert caller.cancelled()


async def test_a_statement_failing_after_the_cancellation_leaves_no_unretrieved_error() -> None:
    loop = asyncio.get_running_loop()
    reported: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: reported.append(context))
    try:
        statement = Statement(ValueError("refused"))
        caller = asyncio.create_task(not_interrupted(statement.run()))
        await statement.started.wait()
        caller.cancel()
        statement.release.set()
        with pytest.raises(asyncio.CancelledError):
            await caller
        del caller, statement
        gc.collect()
        await asyncio.sleep(0)
    finally:
        loop.set_exception_handler(None)
    assert reported == []


async def test_cancel_statement_passes_the_cancellation_on() -> None:
    statement = Statement()
    caller = asyncio.create_task(not_interrupted(statement.run(), cancel_statement=True))
    await statement.started.wait()
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    assert statement.ended == "cancelled"


async def test_a_timeout_is_raised_once_the_statement_is_done() -> None:
    statement = Statement()

    async def bounded() -> None:
        async with asyncio.timeout(0):
            await not_interrupted(statement.run())

    caller = asyncio.create_task(bounded())
    await statement.started.wait()
    for _ in range(5):
        await asyncio.sleep(0)
    assert not caller.done()  # the timeout has fired; the statement still runs
    statement.release.set()
    with pytest.raises(TimeoutError):
        await caller
    assert statement.ended == "finished"
