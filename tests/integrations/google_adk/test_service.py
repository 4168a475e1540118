"""``OpenSquillaSessionService``, call by call, as ADK documents ``BaseSessionService``
(and as its ``DatabaseSessionService`` and ``SqliteSessionService`` behave), on both
backends."""

from __future__ import annotations

import uuid

import pytest
from google.adk.errors import StaleSessionError
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events import Event, EventActions
from google.adk.sessions import Session
from google.adk.sessions.base_session_service import GetSessionConfig
from google.genai import types

from opensquilla.session import SessionManager, SessionStorage
from opensquilla.session.integrations.google_adk import (
    OpenSquillaSessionService,
    _service,
    parse_session_key,
)

APP, USER = "travel", "u-1"


def text_event(author: str, text: str, **actions: object) -> Event:
    role = "user" if author == "user" else "model"
    return Event(
        author=author,
        invocation_id="inv",
        content=types.Content(role=role, parts=[types.Part(text=text)]),
        actions=EventActions(**actions),  # type: ignore[arg-type]
    )


async def test_create_with_given_and_generated_ids(service: OpenSquillaSessionService) -> None:
    given = await service.create_session(app_name=APP, user_id=USER, session_id="s-1")
    generated = await service.create_session(app_name=APP, user_id=USER)
    assert (given.id, given.app_name, given.user_id, given.events) == ("s-1", APP, USER, [])
    assert uuid.UUID(generated.id)  # ADK's default: a uuid4
    assert given.last_update_time > 0
    for session in (given, generated):
        fetched = await service.get_session(app_name=APP, user_id=USER, session_id=session.id)
        assert fetched is not None and fetched.id == session.id and fetched.events == []


async def test_duplicate_id_is_refused_and_nothing_changes(
    service: OpenSquillaSessionService, manager: SessionManager
) -> None:
    await service.create_session(app_name=APP, user_id=USER, session_id="dup", state={"a": 1})
    with pytest.raises(AlreadyExistsError, match="Session with id dup already exists"):
        await service.create_session(
            app_name=APP, user_id=USER, session_id="dup", state={"a": 2, "app:x": 1}
        )
    fetched = await service.get_session(app_name=APP, user_id=USER, session_id="dup")
    assert fetched is not None and fetched.state == {"a": 1}
    # The same id under another user or app is another session, as in ADK.
    await service.create_session(app_name=APP, user_id="u-2", session_id="dup")
    await service.create_session(app_name="other", user_id=USER, session_id="dup")


async def test_initial_state_is_split_by_prefix(
    service: OpenSquillaSessionService, manager: SessionManager
) -> None:
    state = {"step": 1, "app:version": 3, "user:lang": "pt", "temp:scratch": "x"}
    created = await service.create_session(app_name=APP, user_id=USER, session_id="s", state=state)
    merged = {"step": 1, "app:version": 3, "user:lang": "pt"}
    assert created.state == merged  # temp: is never stored (ADK drops it at creation too)
    key = service.session_key(app_name=APP, user_id=USER, session_id="s")
    assert (await manager.get_state(key)).state == {"step": 1}
    assert (await manager.get_scope_state("app", f"agent:main:adk:{APP}")).state == {"version": 3}
    assert (await manager.get_scope_state("user", f"agent:main:adk:{APP}:{USER}")).state == {
        "lang": "pt"
    }
    # Another session of the same user sees the app and user state, not the session's.
    other = await service.create_session(app_name=APP, user_id=USER, session_id="t")
    assert other.state == {"app:version": 3, "user:lang": "pt"}
    stranger = await service.create_session(app_name=APP, user_id="u-9", session_id="t")
    assert stranger.state == {"app:version": 3}
    assert await service.get_user_state(app_name=APP, user_id=USER) == {"lang": "pt"}
    assert await service.get_user_state(app_name=APP, user_id="nobody") == {}


async def test_bad_initial_state_writes_nothing(
    service: OpenSquillaSessionService, manager: SessionManager
) -> None:
    with pytest.raises(ValueError, match="not JSON"):
        await service.create_session(
            app_name=APP, user_id=USER, session_id="nan", state={"app:x": float("nan")}
        )
    assert await service.get_session(app_name=APP, user_id=USER, session_id="nan") is None
    assert await manager.count_sessions() == 0


async def test_get_session_missing_and_configs(service: OpenSquillaSessionService) -> None:
    assert await service.get_session(app_name=APP, user_id=USER, session_id="none") is None
    session = await service.create_session(app_name=APP, user_id=USER, session_id="s")
    events = []
    for i in range(5):
        event = text_event("user" if i % 2 == 0 else "agent", f"m{i}")
        event.timestamp = 1000.0 + i
        events.append(await service.append_event(session, event))

    async def read(**config: object) -> list[Event]:
        got = await service.get_session(
            app_name=APP,
            user_id=USER,
            session_id="s",
            config=GetSessionConfig(**config) if config else None,  # type: ignore[arg-type]
        )
        assert got is not None
        return got.events

    assert await read() == events
    assert await read(num_recent_events=2) == events[3:]
    assert await read(num_recent_events=9) == events
    assert await read(num_recent_events=0) == []
    assert await read(after_timestamp=1002.0) == events[2:]  # >=, as ADK
    assert await read(after_timestamp=1002.5, num_recent_events=1) == events[4:]
    assert await read(after_timestamp=5000.0) == []
    with pytest.raises(ValueError, match="greater than or equal to 0"):
        GetSessionConfig(num_recent_events=-1)


async def test_state_deltas_by_prefix(
    service: OpenSquillaSessionService, manager: SessionManager
) -> None:
    session = await service.create_session(
        app_name=APP, user_id=USER, session_id="s", state={"keep": True}
    )
    delta = {"step": 2, "app:flag": "on", "user:name": "Ana", "temp:t": 1}
    await service.append_event(session, text_event("agent", "hi", state_delta=delta))
    # In memory, as ADK's services leave it: temp: is applied for the invocation.
    assert session.state == {"keep": True, "step": 2, "app:flag": "on", "user:name": "Ana"} | {
        "temp:t": 1
    }
    # The stored event no longer carries temp:, and neither does the store.
    assert "temp:t" not in session.events[-1].actions.state_delta
    fetched = await service.get_session(app_name=APP, user_id=USER, session_id="s")
    assert fetched is not None
    assert fetched.state == {"keep": True, "step": 2, "app:flag": "on", "user:name": "Ana"}
    assert fetched.events[-1].actions.state_delta == {
        "step": 2,
        "app:flag": "on",
        "user:name": "Ana",
    }
    key = service.session_key(app_name=APP, user_id=USER, session_id="s")
    assert (await manager.get_state(key)).state == {"keep": True, "step": 2}
    sibling = await service.create_session(app_name=APP, user_id=USER, session_id="t")
    assert sibling.state == {"app:flag": "on", "user:name": "Ana"}


async def test_stale_session_is_refused_as_adk_refuses_it(
    service: OpenSquillaSessionService, manager: SessionManager
) -> None:
    await service.create_session(app_name=APP, user_id=USER, session_id="s")
    first = await service.get_session(app_name=APP, user_id=USER, session_id="s")
    second = await service.get_session(app_name=APP, user_id=USER, session_id="s")
    assert first is not None and second is not None
    await service.append_event(first, text_event("user", "one", state_delta={"n": 1}))
    with pytest.raises(StaleSessionError, match="modified in storage since it was loaded"):
        await service.append_event(second, text_event("user", "two", state_delta={"n": 2}))
    key = service.session_key(app_name=APP, user_id=USER, session_id="s")
    assert [entry.content for entry in await manager.get_transcript(key)] == ["one"]
    assert (await manager.get_state(key)).state == {"n": 1}
    assert isinstance(StaleSessionError("x"), ValueError)  # ADK's own type, a ValueError
    # Reloaded, it appends again; and the first object keeps appending.
    reloaded = await service.get_session(app_name=APP, user_id=USER, session_id="s")
    assert reloaded is not None
    await service.append_event(reloaded, text_event("user", "two"))
    with pytest.raises(StaleSessionError):
        await service.append_event(first, text_event("user", "three"))


async def test_session_object_of_adk_making_without_marker(
    service: OpenSquillaSessionService,
) -> None:
    created = await service.create_session(app_name=APP, user_id=USER, session_id="s")
    # A session object built by hand (no storage marker): judged by its last update time.
    behind = Session(id="s", app_name=APP, user_id=USER, last_update_time=0.0)
    with pytest.raises(StaleSessionError):
        await service.append_event(behind, text_event("user", "x"))
    current = Session(
        id="s", app_name=APP, user_id=USER, last_update_time=created.last_update_time + 1
    )
    await service.append_event(current, text_event("user", "y"))
    missing = Session(id="gone", app_name=APP, user_id=USER)
    with pytest.raises(SessionNotFoundError, match="Session gone not found"):
        await service.append_event(missing, text_event("user", "z"))


async def test_partial_event_is_not_stored(service: OpenSquillaSessionService) -> None:
    session = await service.create_session(app_name=APP, user_id=USER, session_id="s")
    partial = text_event("agent", "chunk")
    partial.partial = True
    assert await service.append_event(session, partial) is partial
    fetched = await service.get_session(app_name=APP, user_id=USER, session_id="s")
    assert fetched is not None and fetched.events == [] and session.events == []


async def test_list_by_app_and_by_user_is_exact(
    service: OpenSquillaSessionService, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_service, "LIST_PAGE_SIZE", 2)  # several pages
    made = [
        ("a", "u", "1"),
        ("a", "u", "2"),
        ("a", "u:2", "3"),  # a colon in the user id is no separator
        ("a", "u2", "4"),  # "u" is not a prefix of "u2"'s sessions
        ("a", "v", "5"),
        ("a:b", "u", "6"),  # nor "a" of "a:b"'s
        ("ab", "u", "7"),
    ]
    for app, user, sid in made:
        session = await service.create_session(
            app_name=app, user_id=user, session_id=sid, state={"sid": sid}
        )
        if sid == "1":
            first = session
    await service.append_event(first, text_event("user", "newest", state_delta={"user:x": 1}))

    def ids(response: object) -> list[tuple[str, str]]:
        return [(s.user_id, s.id) for s in response.sessions]  # type: ignore[attr-defined]

    by_app = await service.list_sessions(app_name="a")
    # Oldest update first, so the last one is the most recently active (ADK's order).
    assert ids(by_app) == [("u", "2"), ("u:2", "3"), ("u2", "4"), ("v", "5"), ("u", "1")]
    assert all(s.events == [] for s in by_app.sessions)
    assert by_app.sessions[-1].state == {"sid": "1", "user:x": 1}
    assert by_app.sessions[0].state == {"sid": "2", "user:x": 1}  # the user state is merged
    assert by_app.sessions[1].state == {"sid": "3"}
    assert ids(await service.list_sessions(app_name="a", user_id="u")) == [("u", "2"), ("u", "1")]
    assert ids(await service.list_sessions(app_name="a:b")) == [("u", "6")]
    assert ids(await service.list_sessions(app_name="nothing")) == []


async def test_delete_session(service: OpenSquillaSessionService, manager: SessionManager) -> None:
    session = await service.create_session(
        app_name=APP, user_id=USER, session_id="s", state={"a": 1, "user:u": 1}
    )
    await service.append_event(session, text_event("user", "hi"))
    await service.create_session(app_name=APP, user_id=USER, session_id="keep")
    await service.delete_session(app_name=APP, user_id=USER, session_id="s")
    assert await service.get_session(app_name=APP, user_id=USER, session_id="s") is None
    await service.delete_session(app_name=APP, user_id=USER, session_id="s")  # no error
    assert [s.id for s in (await service.list_sessions(app_name=APP)).sessions] == ["keep"]
    assert await service.get_user_state(app_name=APP, user_id=USER) == {"u": 1}
    # Created again, it starts empty.
    again = await service.create_session(app_name=APP, user_id=USER, session_id="s")
    assert again.state == {"user:u": 1} and again.events == []


async def test_events_round_trip_and_entry_mapping(
    service: OpenSquillaSessionService, manager: SessionManager
) -> None:
    session = await service.create_session(app_name=APP, user_id=USER, session_id="s")
    call = types.FunctionCall(id="call-1", name="lookup", args={"city": "Lisboa", "n": 2})
    events = [
        text_event("user", "weather?\x00 ünïcode"),
        Event(
            author="planner",
            invocation_id="inv",
            content=types.Content(
                role="model",
                parts=[
                    types.Part(text="thinking", thought=True),
                    types.Part(text="let me look"),
                    types.Part(function_call=call),
                    types.Part(function_call=types.FunctionCall(id="call-2", name="time", args={})),
                ],
            ),
            usage_metadata=types.GenerateContentResponseUsageMetadata(
                prompt_token_count=10, candidates_token_count=3
            ),
        ),
        Event(
            author="planner",
            invocation_id="inv",
            content=types.Content(
                role="user",
                parts=[
                    types.Part(
                        function_response=types.FunctionResponse(
                            id="call-1", name="lookup", response={"temp": 21.5}
                        )
                    ),
                    types.Part(
                        function_response=types.FunctionResponse(
                            id="call-2", name="time", response={"now": "noon"}
                        )
                    ),
                ],
            ),
        ),
        Event(
            author="planner",
            invocation_id="inv",
            branch="root.planner",
            content=types.Content(
                role="model",
                parts=[
                    types.Part(inline_data=types.Blob(mime_type="image/png", data=b"\x89P\x00"))
                ],
            ),
            actions=EventActions(
                state_delta={"city": "Lisboa", "nested": {"a": [1, 2.5, None]}},
                artifact_delta={"map.png": 1},
                transfer_to_agent="writer",
                escalate=True,
                skip_summarization=True,
            ),
            custom_metadata={"trace": "t-1"},
        ),
        Event(author="writer", invocation_id="inv2"),  # no content at all
    ]
    for event in events:
        await service.append_event(session, event)
    fetched = await service.get_session(app_name=APP, user_id=USER, session_id="s")
    assert fetched is not None
    assert fetched.events == events == session.events
    assert [e.model_dump_json() for e in fetched.events] == [e.model_dump_json() for e in events]
    key = service.session_key(app_name=APP, user_id=USER, session_id="s")
    entries = await manager.get_transcript(key)
    rows = [(e.role, e.content, e.tool_call_id, e.reasoning_content) for e in entries]
    assert rows[0] == ("user", "weather?\x00 ünïcode", None, None)
    assert rows[1] == ("assistant", "let me look", None, "thinking")
    assert entries[1].tool_calls == [
        {
            "id": "call-1",
            "type": "function",
            "function": {"name": "lookup", "arguments": '{"city": "Lisboa", "n": 2}'},
        },
        {"id": "call-2", "type": "function", "function": {"name": "time", "arguments": "{}"}},
    ]
    assert rows[2][0] == "tool" and rows[2][2] == "call-1"
    assert "21.5" in (rows[2][1] or "") and "noon" in (rows[2][1] or "")
    assert entries[2].tool_calls == [
        {"id": "call-1", "type": "tool_result", "name": "lookup"},
        {"id": "call-2", "type": "tool_result", "name": "time"},
    ]
    assert rows[3] == ("assistant", None, None, None) and rows[4] == rows[3]
    # Search sees the text.
    hits = await manager.search_transcript("weather", session_key=key)
    assert hits


async def test_key_scheme_round_trips() -> None:
    service = OpenSquillaSessionService(":memory:", agent_id="Travel Desk")
    hostile = ["", " lead", "trail ", "a:b", "50%", "%3A", "tab\there", "ünï", "line\nfeed"]
    for app in hostile:
        for user in hostile:
            key = service.session_key(app_name=app, user_id=user, session_id=app + user)
            assert key.startswith("agent:travel-desk:adk:") and key == key.strip()
            address = parse_session_key(key)
            assert (address.app_name, address.user_id, address.session_id) == (
                app,
                user,
                app + user,
            )
    assert service.session_key(app_name="a", user_id="u", session_id="s") == (
        "agent:travel-desk:adk:a:u:s"
    )
    with pytest.raises(ValueError, match="limit is 512"):
        service.session_key(app_name="a", user_id="u", session_id="x" * 600)
    with pytest.raises(ValueError, match="NUL"):
        service.session_key(app_name="a", user_id="u\x00", session_id="s")
    with pytest.raises(ValueError, match="not a Google ADK session key"):
        parse_session_key("agent:main:main")
    await service.close()


async def test_dsn_service_owns_its_store(database: str) -> None:
    async with OpenSquillaSessionService(database) as first:
        await first.create_session(app_name=APP, user_id=USER, session_id="s")
        second = OpenSquillaSessionService(database)
        assert await second.get_session(app_name=APP, user_id=USER, session_id="s")
        assert await first.manager() is not await second.manager()
        assert (await first.manager()).storage is (await second.manager()).storage  # shared
        await second.close()
        assert await first.get_session(app_name=APP, user_id=USER, session_id="s")
    with pytest.raises(RuntimeError, match="closed"):
        await first.get_session(app_name=APP, user_id=USER, session_id="s")


async def test_given_storage_is_left_open(storage: SessionStorage) -> None:
    async with OpenSquillaSessionService(storage) as adk:
        await adk.create_session(app_name=APP, user_id=USER, session_id="s")
    assert storage.is_connected
