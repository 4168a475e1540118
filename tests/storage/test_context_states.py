"""Provider context states: saved per key across generations, filtered, invalidated
(SEMANTICS §2.5, §4)."""

from __future__ import annotations

import uuid

from opensquilla.session import SessionStorage
from opensquilla.session.models import SessionContextState

from . import add_state, new_session

KEY = "agent:main:main"


def _ids(states: list[SessionContextState]) -> list[int | None]:
    return [s.id for s in states]


async def test_save_sets_the_id_and_canonicalises_the_key(storage: SessionStorage) -> None:
    node = await new_session(storage, KEY)
    state = SessionContextState(
        session_id=node.session_id, session_key="agent:Main:main", state_kind="k"
    )
    saved = await storage.save_context_state(state)
    assert saved is state
    assert isinstance(state.id, int)
    assert state.session_key == KEY
    assert await storage.get_context_states("agent:MAIN:main") == [state]


async def test_every_field_round_trips(storage: SessionStorage) -> None:
    node = await new_session(storage, KEY)
    state = await add_state(
        storage,
        node,
        "provider_cache",
        provider="anthropic",
        model="claude",
        payload={"cache": {"ids": [1, 2]}, "flag": True, "none": None},
        covered_through_id=12,
        created_at=1_700_000_000_000,
        expires_at=1_700_000_360_000,
        portable=True,
        cacheable=True,
        valid=False,
        invalid_reason="superseded",
        schema_version=3,
    )
    assert await storage.get_context_states(KEY, valid_only=False) == [state]


async def test_default_payload_is_an_empty_object(storage: SessionStorage) -> None:
    node = await new_session(storage, KEY)
    await add_state(storage, node)
    [stored] = await storage.get_context_states(KEY)
    assert stored.payload == {}
    assert (stored.valid, stored.portable, stored.cacheable) == (True, False, False)


async def test_filters(storage: SessionStorage) -> None:
    node = await new_session(storage, KEY)
    a = await add_state(storage, node, "summary", provider="portable", created_at=1)
    b = await add_state(storage, node, "cache", provider="anthropic", created_at=2)
    c = await add_state(storage, node, "summary", provider="anthropic", created_at=3)
    d = await add_state(storage, node, "summary", provider="portable", created_at=4, valid=False)
    other = await new_session(storage, "agent:main:other")
    await add_state(storage, other, "summary", created_at=0)

    assert _ids(await storage.get_context_states(KEY)) == [a.id, b.id, c.id]
    assert _ids(await storage.get_context_states(KEY, valid_only=False)) == [a.id, b.id, c.id, d.id]
    assert _ids(await storage.get_context_states(KEY, provider="anthropic")) == [b.id, c.id]
    assert _ids(await storage.get_context_states(KEY, state_kind="summary")) == [a.id, c.id]
    assert _ids(
        await storage.get_context_states(
            KEY, provider="portable", state_kind="summary", valid_only=False
        )
    ) == [a.id, d.id]
    assert await storage.get_context_states(KEY, provider="nobody") == []


async def test_order_is_created_at_then_id(storage: SessionStorage) -> None:
    node = await new_session(storage, KEY)
    late = await add_state(storage, node, created_at=300)
    tie_1 = await add_state(storage, node, created_at=200)
    tie_2 = await add_state(storage, node, created_at=200)
    early = await add_state(storage, node, created_at=100)
    assert _ids(await storage.get_context_states(KEY)) == [early.id, tie_1.id, tie_2.id, late.id]


async def test_states_of_earlier_generations_are_included(storage: SessionStorage) -> None:
    """States are looked up by key, so a reset keeps them visible (as invalidated rows)."""
    node = await new_session(storage, KEY)
    older = await add_state(storage, node, session_id=str(uuid.uuid4()), created_at=1)
    current = await add_state(storage, node, created_at=2)
    states = await storage.get_context_states(KEY)
    assert _ids(states) == [older.id, current.id]
    assert {s.session_id for s in states} == {older.session_id, node.session_id}


async def test_missing_key_has_no_states(storage: SessionStorage) -> None:
    assert await storage.get_context_states("agent:main:nobody") == []
    assert await storage.invalidate_context_states("agent:main:nobody") == 0


async def test_invalidate_counts_then_finds_nothing(storage: SessionStorage) -> None:
    node = await new_session(storage, KEY)
    await add_state(storage, node, "summary")
    await add_state(storage, node, "cache")
    await add_state(storage, node, "old", valid=False, invalid_reason="earlier")
    assert await storage.invalidate_context_states("agent:Main:main") == 2
    assert await storage.invalidate_context_states(KEY) == 0
    assert await storage.get_context_states(KEY) == []
    reasons = [s.invalid_reason for s in await storage.get_context_states(KEY, valid_only=False)]
    assert reasons == ["invalidated", "invalidated", "earlier"]


async def test_invalidate_respects_filters_and_reason(storage: SessionStorage) -> None:
    node = await new_session(storage, KEY)
    other = await new_session(storage, "agent:main:other")
    keep_kind = await add_state(storage, node, "cache", provider="anthropic")
    drop = await add_state(storage, node, "summary", provider="anthropic")
    keep_provider = await add_state(storage, node, "summary", provider="portable")
    elsewhere = await add_state(storage, other, "summary", provider="anthropic")

    changed = await storage.invalidate_context_states(
        KEY, provider="anthropic", state_kind="summary", reason="model_switch"
    )
    assert changed == 1
    assert _ids(await storage.get_context_states(KEY)) == [keep_kind.id, keep_provider.id]
    [invalid] = [s for s in await storage.get_context_states(KEY, valid_only=False) if not s.valid]
    assert (invalid.id, invalid.invalid_reason) == (drop.id, "model_switch")
    assert _ids(await storage.get_context_states(other.session_key)) == [elsewhere.id]
