"""Concurrent ``append_event``, the interleavings forced with barriers: the revision's
compare-and-set lets exactly one of two writers holding the same revision through, and
one session object appended to from several tasks keeps every event, in turn."""

from __future__ import annotations

import asyncio
from typing import Any

from google.adk.errors import StaleSessionError
from google.adk.events import Event, EventActions
from google.genai import types

from opensquilla.session import SessionManager, SessionStorage
from opensquilla.session.integrations.google_adk import OpenSquillaSessionService

APP, USER = "app", "user"


def event(text: str, **delta: Any) -> Event:
    return Event(
        author="user",
        invocation_id="inv",
        content=types.Content(role="user", parts=[types.Part(text=text)]),
        actions=EventActions(state_delta=delta),
    )


async def test_two_writers_at_one_revision_exactly_one_wins(
    storage: SessionStorage, manager: SessionManager
) -> None:
    # Two services (two workers: no shared in-process lock), two session objects read at
    # the same revision; both reach their compare-and-set before either runs it.
    one, two = OpenSquillaSessionService(storage), OpenSquillaSessionService(storage)
    await one.create_session(app_name=APP, user_id=USER, session_id="s")
    loaded = [
        await adk.get_session(app_name=APP, user_id=USER, session_id="s") for adk in (one, two)
    ]
    barrier = asyncio.Barrier(2)
    for adk in (one, two):
        inner = await adk.manager()
        original = inner.update_state

        async def gated(*args: Any, _original: Any = original, **kwargs: Any) -> int:
            await barrier.wait()
            result: int = await _original(*args, **kwargs)
            return result

        inner.update_state = gated  # type: ignore[method-assign]
    results = await asyncio.gather(
        one.append_event(loaded[0], event("from one", who="one")),  # type: ignore[arg-type]
        two.append_event(loaded[1], event("from two", who="two")),  # type: ignore[arg-type]
        return_exceptions=True,
    )
    refused = [r for r in results if isinstance(r, StaleSessionError)]
    won = [r for r in results if isinstance(r, Event)]
    assert len(refused) == 1 and len(won) == 1
    key = one.session_key(app_name=APP, user_id=USER, session_id="s")
    winner = won[0].content.parts[0].text  # type: ignore[union-attr,index]
    assert [e.content for e in await manager.get_transcript(key)] == [winner]
    assert (await manager.get_state(key)).state == {"who": winner.removeprefix("from ")}


async def test_one_session_object_from_many_tasks_keeps_every_event(
    storage: SessionStorage, manager: SessionManager
) -> None:
    adk = OpenSquillaSessionService(storage)
    session = await adk.create_session(app_name=APP, user_id=USER, session_id="s")
    inner = await adk.manager()
    original = inner.update_state
    first_in = asyncio.Event()
    release = asyncio.Event()

    async def held(*args: Any, **kwargs: Any) -> int:
        if not first_in.is_set():
            first_in.set()
            await release.wait()  # the first writer holds its turn...
        result: int = await original(*args, **kwargs)
        return result

    inner.update_state = held  # type: ignore[method-assign]
    tasks = [asyncio.create_task(adk.append_event(session, event(f"e{i}", n=i))) for i in range(4)]
    await first_in.wait()
    await asyncio.sleep(0)  # ...while the others queue behind it
    release.set()
    await asyncio.gather(*tasks)
    key = adk.session_key(app_name=APP, user_id=USER, session_id="s")
    assert [e.content for e in await manager.get_transcript(key)] == ["e0", "e1", "e2", "e3"]
    assert [e.content.parts[0].text for e in session.events] == ["e0", "e1", "e2", "e3"]  # type: ignore[union-attr,index]
    stored = await manager.get_state(key)
    assert stored.state == {"n": 3} and stored.revision == 5  # created at 1, four appends
