"""The pop on its two paths (``uow.pop_newest``): on the pool's DBAPI connection while
nothing listens for statements (the rows decoded as a read decodes them), through a
``Connection`` once a listener is attached; the same entries either way, every field, and
``None`` once the generation is empty."""

from __future__ import annotations

from typing import Any

import pytest

from opensquilla.session import SessionManager, SessionStorage
from opensquilla.session.db import uow_writes
from tests.storage.direct_paths import listening

KEY = "agent:main:direct-pop"


def _direct_pops(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Each pop run on the pool's DBAPI connection: whether the generation had a row."""
    taken: list[bool] = []
    original = uow_writes.returned_or_probed

    def counted(*args: Any, **kwargs: Any) -> Any:
        rows, keys, live = original(*args, **kwargs)
        taken.append(live)
        return rows, keys, live

    monkeypatch.setattr(uow_writes, "returned_or_probed", counted)
    return taken


async def test_both_paths_pop_the_same_entries(
    manager: SessionManager, storage: SessionStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    await manager.create(KEY)
    await manager.append_messages(
        KEY,
        [
            {"role": "user", "content": "q", "metadata": {"z": 1, "a": [1, 2.5, None]}},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f"}}],
                "turn_usage": {"input_tokens": 3},
                "token_count": 7,
            },
            {"role": "tool", "content": "out\N{SNOWMAN}", "tool_call_id": "c1"},
        ],
    )
    stored = await manager.get_transcript(KEY)
    taken = _direct_pops(monkeypatch)
    direct = [await manager.pop_message(KEY), await manager.pop_message(KEY)]
    seen: list[str] = []
    with listening(storage, "before_cursor_execute", lambda *a: seen.append(a[2])):
        watched = [await manager.pop_message(KEY), await manager.pop_message(KEY)]
    assert taken == [True, True]
    assert any(s.startswith("DELETE FROM transcript_entries") for s in seen)
    assert [e.model_dump() for e in direct + watched[:1] if e is not None] == [
        e.model_dump() for e in reversed(stored)
    ]
    assert watched[1] is None
    assert await manager.pop_message(KEY) is None  # the direct path's empty pop
    assert taken == [True, True, False]
    assert list(await manager.get_transcript(KEY)) == []
