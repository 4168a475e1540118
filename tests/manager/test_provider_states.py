"""Which context state a provider request replays, and OpenAI Responses' compacted window
as a context state (docs/semantics.md#provider-states). The pure helpers run without a
database; the round trips and the manager's read run on both backends."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from opensquilla.session import (
    OPENAI_RESPONSES_COMPACTED_WINDOW_STATE_KIND,
    SessionManager,
    SessionStorage,
    build_openai_responses_input_items,
    latest_context_state,
    openai_responses_compacted_window_state,
)
from opensquilla.session.errors import InvalidInputError, SessionNotFoundError
from opensquilla.session.models import SessionContextState

KEY = "agent:main:responses"


def state(
    provider: str = "portable",
    *,
    portable: bool | None = None,
    created_at: int = 1_000,
    state_id: int | None = None,
    kind: str = "structured_summary_v1",
    **fields: object,
) -> SessionContextState:
    return SessionContextState(
        session_id="s1",
        session_key=KEY,
        provider=provider,
        state_kind=kind,
        payload={"name": f"{provider}@{created_at}"},
        portable=(provider == "portable") if portable is None else portable,
        created_at=created_at,
        id=state_id,
        **fields,  # type: ignore[arg-type]
    )


def window(
    output: list[dict[str, object]], created_at: int, **fields: object
) -> SessionContextState:
    made = openai_responses_compacted_window_state(
        session_id="s1",
        session_key=KEY,
        model="gpt-5.5",
        compact_response={"id": f"resp-{created_at}", "output": output},
        covered_through_id=created_at // 100,
    )
    made.created_at = created_at
    for name, value in fields.items():
        setattr(made, name, value)
    return made


# -- latest_context_state ----------------------------------------------------------------


def test_the_newest_state_wins_whatever_the_order_given() -> None:
    old, new = state(created_at=1_000), state(created_at=3_000)
    assert latest_context_state([new, old]) is new
    assert latest_context_state([old, new]) is new
    # Same time: the higher id, then the later position.
    first, second = state(state_id=7), state(state_id=9)
    assert latest_context_state([second, first]) is second
    unsaved_a, unsaved_b = state(), state()
    assert latest_context_state([unsaved_a, unsaved_b]) is unsaved_b
    assert latest_context_state([]) is None


def test_a_provider_reads_its_own_states_and_portable_ones() -> None:
    portable = state(created_at=1_000)
    anthropic = state("anthropic", kind="anthropic_compaction_block", created_at=2_000)
    responses = window([{"type": "message"}], created_at=3_000)

    assert latest_context_state([portable, anthropic, responses], "anthropic") is anthropic
    assert latest_context_state([portable, anthropic], "openai_responses") is portable
    assert latest_context_state([portable, anthropic, responses], "openai_responses") is responses
    assert latest_context_state([anthropic], "gemini") is None  # never another's native state
    assert latest_context_state([portable, anthropic, responses]) is responses  # any provider
    assert (
        latest_context_state(
            [portable, responses], "openai_responses", state_kind="structured_summary_v1"
        )
        is portable
    )


def test_only_usable_states_count() -> None:
    live = state(created_at=1_000)
    invalid = state(created_at=2_000, valid=False, invalid_reason="session_reset")
    expired = state(created_at=3_000, expires_at=5_000)
    assert latest_context_state([live, invalid, expired], now_ms=4_999) is expired
    assert latest_context_state([live, invalid, expired], now_ms=5_000) is live
    assert latest_context_state([invalid]) is None


def test_latest_context_state_checks_its_arguments() -> None:
    with pytest.raises(InvalidInputError, match="states"):
        latest_context_state("abc")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match=r"states\[0\]"):
        latest_context_state([{"provider": "portable"}])  # type: ignore[list-item]
    with pytest.raises(InvalidInputError, match="provider"):
        latest_context_state([], 5)  # type: ignore[arg-type]


@pytest.mark.parametrize("now", ["soon", True, 3.5, -1])
def test_now_ms_must_be_a_non_negative_integer(now: object) -> None:
    with pytest.raises(InvalidInputError, match="now_ms"):
        latest_context_state([], now_ms=now)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="now_ms"):
        build_openai_responses_input_items(
            context_states=[],
            current_items=[],
            now_ms=now,  # type: ignore[arg-type]
        )


@pytest.mark.parametrize(
    ("items", "named"),
    [
        ({"role": "user", "content": "hi"}, "current_items must"),
        ("hello", "current_items must"),
        (b"hello", "current_items must"),
        (5, "current_items must"),
        ([{"role": "user"}, "hello"], r"current_items\[1\]"),
    ],
)
def test_current_items_must_be_a_list_of_dicts(items: object, named: str) -> None:
    """A dict would replay its keys, a string its characters: refused, naming the argument."""
    with pytest.raises(InvalidInputError, match=named):
        build_openai_responses_input_items(
            context_states=[],
            current_items=items,  # type: ignore[arg-type]
        )


# -- the OpenAI Responses compacted window -----------------------------------------------


def test_the_compacted_window_is_stored_as_an_opaque_native_state() -> None:
    output = [{"type": "reasoning", "encrypted_content": "opaque"}]
    made = openai_responses_compacted_window_state(
        session_id="s1",
        session_key="agent:Main:Responses",
        model="gpt-5.5",
        compact_response={"id": "resp_1", "output": output, "usage": {"input_tokens": 3}},
        covered_through_id=42,
    )
    assert made.provider == "openai_responses"
    assert made.state_kind == OPENAI_RESPONSES_COMPACTED_WINDOW_STATE_KIND
    assert (made.portable, made.cacheable, made.valid) == (False, False, True)
    assert made.session_key == "agent:main:Responses"  # the agent part canonical
    assert made.covered_through_id == 42
    assert made.payload == {
        "response_id": "resp_1",
        "output": output,
        "usage": {"input_tokens": 3},
        "opaque": True,
    }
    output.append({"type": "changed later"})
    assert len(made.payload["output"]) == 1  # a copy
    with pytest.raises(InvalidInputError, match="output list"):
        openai_responses_compacted_window_state(
            session_id="s1",
            session_key=KEY,
            model="m",
            compact_response={"output": "not a list"},
            covered_through_id=0,
        )


def test_the_latest_window_is_replayed_as_is_before_the_current_items() -> None:
    older = window([{"type": "message", "content": "older"}], created_at=1_000)
    latest_output = [
        {"type": "message", "role": "assistant", "content": "retained"},
        {"type": "reasoning", "encrypted_content": "opaque-latest"},
    ]
    latest = window(latest_output, created_at=3_000)
    expired = window([{"type": "message", "content": "expired"}], 4_000, expires_at=4_500)
    portable = state(created_at=9_000)  # a portable summary is not a Responses window
    current = [{"type": "message", "role": "user", "content": "continue"}]

    items = build_openai_responses_input_items(
        context_states=[latest, portable, expired, older], current_items=current, now_ms=5_000
    )

    assert items == [*latest_output, *current]
    items[0]["content"] = "mutated"
    assert latest.payload["output"][0]["content"] == "retained"  # copies, not the payload
    assert build_openai_responses_input_items(context_states=[], current_items=current) == current


# -- stored: both backends ---------------------------------------------------------------


async def test_the_window_round_trips_through_the_store(manager: SessionManager) -> None:
    node = await manager.create(KEY)
    output = [
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "é"}]},
        {"type": "reasoning", "encrypted_content": "gAAAA…opaque", "summary": []},
    ]
    made = openai_responses_compacted_window_state(
        session_id=node.session_id,
        session_key=KEY,
        model="gpt-5.5",
        compact_response={"id": "resp_c", "output": output, "usage": {"input_tokens": 120}},
        covered_through_id=42,
    )

    saved = await manager.save_context_state(made)
    (loaded,) = await manager.get_context_states(
        KEY, provider="openai_responses", state_kind=OPENAI_RESPONSES_COMPACTED_WINDOW_STATE_KIND
    )

    assert saved.id is not None and loaded.id == saved.id
    assert loaded.payload == made.payload
    assert (loaded.portable, loaded.cacheable, loaded.covered_through_id) == (False, False, 42)
    chosen = await manager.get_latest_context_state(KEY, "openai_responses")
    assert chosen is not None and chosen.id == saved.id
    replay = build_openai_responses_input_items(context_states=[loaded], current_items=[])
    assert replay == output


async def test_the_manager_chooses_among_the_current_generations_states(
    manager: SessionManager, storage: SessionStorage
) -> None:
    node = await manager.create(KEY)
    await manager.save_context_state(
        state(created_at=1_000).model_copy(update={"session_id": node.session_id})
    )
    # A valid state still carrying another generation's id (an import, a legacy file).
    stray = state("anthropic", kind="anthropic_compaction_block", created_at=9_000)
    await storage.save_context_state(stray.model_copy(update={"session_id": "older-gen"}))

    chosen = await manager.get_latest_context_state(KEY, "anthropic")
    assert chosen is not None and chosen.provider == "portable"
    assert (
        await manager.get_latest_context_state(KEY, state_kind="anthropic_compaction_block") is None
    )

    await manager.reset(KEY)
    assert await manager.get_latest_context_state(KEY) is None  # the reset invalidated it
    with pytest.raises(SessionNotFoundError):
        await manager.get_latest_context_state("agent:main:missing")


async def test_the_generation_and_validity_are_filtered_in_the_query(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """The read asks the database for the current generation's valid states only (the
    other generations' and the invalid ones are never fetched), over the states' indexes."""
    node = await manager.create(KEY)
    await manager.save_context_state(
        state(created_at=1_000).model_copy(update={"session_id": node.session_id})
    )
    statements: list[str] = []

    def record(_conn: object, _cursor: object, statement: str, *_args: object) -> None:
        statements.append(statement)

    sync_engine = storage.engine.sync_engine
    sa.event.listen(sync_engine, "before_cursor_execute", record)
    try:
        assert await manager.get_latest_context_state(KEY) is not None
    finally:
        sa.event.remove(sync_engine, "before_cursor_execute", record)

    (query,) = [s for s in statements if "FROM session_context_states" in s]
    where = query.split("WHERE", 1)[1]
    assert "session_context_states.session_id =" in where
    assert "session_context_states.valid" in where
