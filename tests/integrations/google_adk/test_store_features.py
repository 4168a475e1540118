"""What the store adds under ADK's calls, and how each meets them: compaction (the summary
as an ADK compaction event), a reset (objects read before it are stale), a cancelled append
(nothing half-written, the object stale), and the order of events appended with a clock
stepped back."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from google.adk.errors import StaleSessionError
from google.adk.events import Event, EventActions
from google.adk.sessions.base_session_service import GetSessionConfig
from google.genai import types

from opensquilla.session import SessionManager, SessionStorage
from opensquilla.session.integrations.google_adk import OpenSquillaSessionService

APP, USER, SID = "app", "user", "s"


def said(text: str, **delta: Any) -> Event:
    author = "user" if text.startswith("q") else "agent"
    return Event(
        author=author,
        invocation_id="inv",
        content=types.Content(
            role="user" if author == "user" else "model", parts=[types.Part(text=text)]
        ),
        actions=EventActions(state_delta=delta),
    )


async def test_compaction_summary_as_an_adk_compaction_event(
    storage: SessionStorage, manager: SessionManager
) -> None:
    service = OpenSquillaSessionService(storage)
    plain = OpenSquillaSessionService(storage, compaction_summary=False)
    session = await service.create_session(app_name=APP, user_id=USER, session_id=SID)
    for i in range(12):
        await service.append_event(session, said(f"{'q' if i % 2 == 0 else 'a'}{i} " + "x" * 80))
    key = service.session_key(app_name=APP, user_id=USER, session_id=SID)
    result = await manager.compact_with_result(key, 200)
    assert result.removed_count > 0
    kept = session.events[result.removed_count :]

    async def events(adk: OpenSquillaSessionService, **config: Any) -> list[Event]:
        got = await adk.get_session(
            app_name=APP,
            user_id=USER,
            session_id=SID,
            config=GetSessionConfig(**config) if config else None,
        )
        assert got is not None
        return got.events

    head, *rest = await events(service)
    assert rest == kept
    compaction = head.actions.compaction
    assert compaction is not None and head.id.startswith("opensquilla-compaction-")
    assert compaction.compacted_content.parts[0].text == result.summary  # type: ignore[index]
    assert compaction.end_timestamp < kept[0].timestamp
    assert await events(plain) == kept
    # Room for it within num_recent_events: counted in; a window that cuts: left out.
    assert (await events(service, num_recent_events=len(kept) + 1))[1:] == kept
    assert await events(service, num_recent_events=len(kept)) == kept
    assert await events(service, num_recent_events=2) == kept[-2:]
    # Nothing was lost: the folded events are in the compacted archive.
    assert len(await manager.get_canonical_transcript(key)) == 12


async def test_a_reset_makes_earlier_objects_stale(
    storage: SessionStorage, manager: SessionManager
) -> None:
    service = OpenSquillaSessionService(storage)
    session = await service.create_session(
        app_name=APP, user_id=USER, session_id=SID, state={"step": 1, "user:lang": "pt"}
    )
    await service.append_event(session, said("q1"))
    await manager.reset(service.session_key(app_name=APP, user_id=USER, session_id=SID))
    with pytest.raises(StaleSessionError):
        await service.append_event(session, said("q2"))
    fresh = await service.get_session(app_name=APP, user_id=USER, session_id=SID)
    assert fresh is not None and fresh.events == [] and fresh.state == {"user:lang": "pt"}
    await service.append_event(fresh, said("q3"))
    again = await service.get_session(app_name=APP, user_id=USER, session_id=SID)
    assert again is not None and again.events == fresh.events


async def test_a_cancelled_append_leaves_nothing_and_the_object_stale(
    storage: SessionStorage, manager: SessionManager
) -> None:
    service = OpenSquillaSessionService(storage)
    session = await service.create_session(app_name=APP, user_id=USER, session_id=SID)
    inner = await service.manager()
    original = inner.append_message
    reached = asyncio.Event()

    async def stuck(*args: Any, **kwargs: Any) -> Any:
        reached.set()
        await asyncio.Event().wait()  # cancelled here, after the compare-and-set
        return await original(*args, **kwargs)

    inner.append_message = stuck  # type: ignore[method-assign]
    task = asyncio.create_task(service.append_event(session, said("q1", n=1)))
    await reached.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    inner.append_message = original  # type: ignore[method-assign]
    key = service.session_key(app_name=APP, user_id=USER, session_id=SID)
    assert await manager.get_transcript(key) == [] and session.events == []
    with pytest.raises(StaleSessionError):  # its revision was used: reload, then append
        await service.append_event(session, said("q2"))
    reloaded = await service.get_session(app_name=APP, user_id=USER, session_id=SID)
    assert reloaded is not None
    await service.append_event(reloaded, said("q3"))
    assert [e.content for e in await manager.get_transcript(key)] == ["q3"]


async def test_events_keep_append_order_when_the_clock_steps_back(
    storage: SessionStorage,
) -> None:
    service = OpenSquillaSessionService(storage)
    session = await service.create_session(app_name=APP, user_id=USER, session_id=SID)
    late, early = said("q-late"), said("a-early")
    late.timestamp, early.timestamp = 2000.0, 1000.0  # the writer's clock stepped back
    await service.append_event(session, late)
    await service.append_event(session, early)
    fetched = await service.get_session(app_name=APP, user_id=USER, session_id=SID)
    assert fetched is not None and fetched.events == [late, early]
    newest = await service.get_session(
        app_name=APP, user_id=USER, session_id=SID, config=GetSessionConfig(num_recent_events=1)
    )
    assert newest is not None and newest.events == [early]
    after = await service.get_session(
        app_name=APP,
        user_id=USER,
        session_id=SID,
        config=GetSessionConfig(after_timestamp=1500.0),
    )
    assert after is not None and after.events == [late]
