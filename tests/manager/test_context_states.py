"""Context states through the manager: save, filter, invalidate."""

from __future__ import annotations

from opensquilla.session import SessionManager
from opensquilla.session.models import SessionContextState

KEY = "agent:main:ctx"


def _state(session_id: str, **fields: object) -> SessionContextState:
    values: dict[str, object] = {
        "session_id": session_id,
        "session_key": KEY,
        "state_kind": "structured_summary_v1",
    }
    values.update(fields)
    return SessionContextState(**values)  # type: ignore[arg-type]


async def test_roundtrip_keeps_every_field(manager: SessionManager) -> None:
    node = await manager.create(KEY)
    saved = await manager.save_context_state(
        _state(
            node.session_id,
            provider="portable",
            model="m-1",
            payload={"current_status": "halfway", "files": ["a.py", "b.py"], "n": 3},
            covered_through_id=42,
            created_at=1_700,
            expires_at=1_900,
            portable=True,
            cacheable=True,
        )
    )

    (loaded,) = await manager.get_context_states(KEY)

    assert isinstance(saved.id, int)
    assert loaded.model_dump() == saved.model_dump()
    assert loaded.payload == {"current_status": "halfway", "files": ["a.py", "b.py"], "n": 3}
    assert loaded.portable is True and loaded.cacheable is True
    assert loaded.valid is True and loaded.invalid_reason is None


async def test_defaults_roundtrip(manager: SessionManager) -> None:
    node = await manager.create(KEY)
    await manager.save_context_state(_state(node.session_id))

    (loaded,) = await manager.get_context_states(KEY)

    assert loaded.provider == "portable"
    assert loaded.payload == {}
    assert loaded.portable is False and loaded.cacheable is False
    assert loaded.covered_through_id == 0
    assert loaded.expires_at is None


async def test_key_spelling_is_canonicalised(manager: SessionManager) -> None:
    node = await manager.create(KEY)
    saved = await manager.save_context_state(_state(node.session_id, session_key="agent:Main:ctx"))

    assert saved.session_key == KEY
    assert [s.id for s in await manager.get_context_states("agent:MAIN:ctx")] == [saved.id]


async def test_states_come_back_in_creation_order(manager: SessionManager) -> None:
    """created_at first, then id for states saved in the same millisecond."""
    node = await manager.create(KEY)
    late = await manager.save_context_state(_state(node.session_id, created_at=300))
    tie_a = await manager.save_context_state(_state(node.session_id, created_at=200))
    tie_b = await manager.save_context_state(_state(node.session_id, created_at=200))

    loaded = await manager.get_context_states(KEY)

    assert [s.id for s in loaded] == [tie_a.id, tie_b.id, late.id]


async def test_filters_by_provider_kind_and_validity(manager: SessionManager) -> None:
    node = await manager.create(KEY)
    portable = await manager.save_context_state(_state(node.session_id, provider="portable"))
    native = await manager.save_context_state(
        _state(node.session_id, provider="anthropic", state_kind="compaction_block")
    )
    stale = await manager.save_context_state(
        _state(node.session_id, provider="anthropic", state_kind="structured_summary_v1")
    )
    await manager.invalidate_context_states(
        KEY, provider="anthropic", state_kind="structured_summary_v1"
    )

    by_provider = await manager.get_context_states(KEY, provider="anthropic")
    by_kind = await manager.get_context_states(KEY, state_kind="structured_summary_v1")
    everything = await manager.get_context_states(KEY, valid_only=False)
    both = await manager.get_context_states(
        KEY, provider="anthropic", state_kind="structured_summary_v1", valid_only=False
    )

    assert [s.id for s in by_provider] == [native.id]
    assert [s.id for s in by_kind] == [portable.id]
    assert [s.id for s in everything] == [portable.id, native.id, stale.id]
    assert [s.id for s in both] == [stale.id]


async def test_invalidate_reports_how_many_changed(manager: SessionManager) -> None:
    """Only currently valid matching states count; a repeat changes nothing."""
    node = await manager.create(KEY)
    for provider in ("portable", "portable", "openai"):
        await manager.save_context_state(_state(node.session_id, provider=provider))

    first = await manager.invalidate_context_states(KEY, provider="portable", reason="model swap")
    again = await manager.invalidate_context_states(KEY, provider="portable", reason="other")

    assert (first, again) == (2, 0)
    invalid = [s for s in await manager.get_context_states(KEY, valid_only=False) if not s.valid]
    assert [s.invalid_reason for s in invalid] == ["model swap", "model swap"]
    assert [s.provider for s in await manager.get_context_states(KEY)] == ["openai"]


async def test_invalidate_without_filters_and_default_reason(manager: SessionManager) -> None:
    node = await manager.create(KEY)
    await manager.save_context_state(_state(node.session_id, provider="a"))
    await manager.save_context_state(_state(node.session_id, provider="b", state_kind="other"))

    assert await manager.invalidate_context_states(KEY) == 2

    reasons = {s.invalid_reason for s in await manager.get_context_states(KEY, valid_only=False)}
    assert reasons == {"invalidated"}


async def test_invalidate_only_touches_its_key(manager: SessionManager) -> None:
    node = await manager.create(KEY)
    other = await manager.create("agent:main:other")
    await manager.save_context_state(_state(node.session_id))
    await manager.save_context_state(_state(other.session_id, session_key="agent:main:other"))

    await manager.invalidate_context_states(KEY)

    assert len(await manager.get_context_states("agent:main:other")) == 1


async def test_unknown_key_has_no_states(manager: SessionManager) -> None:
    """An unknown key is an empty answer, not a KeyError."""
    await manager.create(KEY)
    assert await manager.get_context_states("agent:main:nobody") == []
    assert await manager.get_context_states("agent:main:nobody", valid_only=False) == []


async def test_invalidating_an_unknown_key_changes_nothing(manager: SessionManager) -> None:
    assert await manager.invalidate_context_states("agent:main:nobody") == 0


async def test_states_of_earlier_generations_stay_visible(manager: SessionManager) -> None:
    """States are looked up by key: the old generation's rows remain, invalidated."""
    node = await manager.create(KEY)
    await manager.save_context_state(_state(node.session_id))
    renewed, _ = await manager.apply_intent(KEY, "reset_same_key")
    fresh = await manager.save_context_state(_state(renewed.session_id))

    current = await manager.get_context_states(KEY)
    every = await manager.get_context_states(KEY, valid_only=False)

    assert [s.id for s in current] == [fresh.id]
    assert {s.session_id for s in every} == {node.session_id, renewed.session_id}
