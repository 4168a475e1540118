"""A plain append during a reset storm (issue 31, item 8).

``append_message`` without a caller epoch means "the current generation". It used to try
twice: a reset committing between its read of the generation and its write, twice in a row,
raised ``StaleEpochError`` (about 25% of appends on PostgreSQL while resets ran). Now it
reads the row again and retries for up to ``PLAIN_APPEND_RETRY_SECONDS``, a bound in time,
not in tries.

The storm is forced, not timed: the storage's append is wrapped so that a reset commits
just before each of the first N tries reaches the database, so every one of them is
fenced out.
"""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from opensquilla.session import SessionManager, SessionStorage
from opensquilla.session.errors import StaleEpochError
from opensquilla.session.usecases import transcript as transcript_module

KEY = "agent:main:reset-storm"
STORM = 25  # resets in a row, each between an append's read and its write


def _storm(
    monkeypatch: pytest.MonkeyPatch,
    storage: SessionStorage,
    manager: SessionManager,
    method: str,
    resets: int | None,
) -> list[int]:
    """Before each of the first ``resets`` calls of the append's write (the use case
    ``usecases.transcript.<method>``; all of them for ``None``), another writer resets the
    session; the tries are counted."""
    real: Callable[..., Awaitable[Any]] = getattr(transcript_module, method)
    tries: list[int] = []

    async def reset_first(*args: Any, **kwargs: Any) -> Any:
        tries.append(len(tries))
        if resets is None or len(tries) <= resets:
            await manager.reset(KEY)
        return await real(*args, **kwargs)

    monkeypatch.setattr(transcript_module, method, reset_first)
    return tries


@pytest.mark.parametrize(
    ("method", "extra"),
    [("append_entry", {}), ("upsert_entry", {"message_id": "m-1"})],
    ids=["append", "upsert"],
)
async def test_a_plain_append_lands_in_the_current_generation_through_a_reset_storm(
    manager: SessionManager,
    storage: SessionStorage,
    monkeypatch: pytest.MonkeyPatch,
    method: str,
    extra: dict[str, Any],
) -> None:
    await manager.create(KEY)
    await manager.append_message(KEY, "user", "before the storm")
    # The bound is in time: a still clock keeps it out of a test about tries (on a busy
    # machine 25 resets with their archives can take longer than the bound itself).
    monkeypatch.setattr(transcript_module, "monotonic", lambda: 1000.0)
    resetter = SessionManager(storage, inject_time_prefix=False)  # another writer
    tries = _storm(monkeypatch, storage, resetter, method, STORM)

    entry = await manager.append_message(KEY, "assistant", "through it", **extra)

    assert len(tries) == STORM + 1
    node = await manager.get_session(KEY)
    assert node is not None and node.epoch == STORM
    assert entry.session_id == node.session_id
    assert [e.content for e in await manager.get_transcript(KEY)] == ["through it"]


async def test_the_retry_is_bounded_in_time_not_in_tries(
    manager: SessionManager, storage: SessionStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A storm that never ends: after PLAIN_APPEND_RETRY_SECONDS (on a fake clock that
    moves one second a try) the append gives up, naming the key, nothing written."""
    await manager.create(KEY)
    clock = itertools.count(1000.0, 1.0)
    monkeypatch.setattr(transcript_module, "monotonic", lambda: next(clock))
    resetter = SessionManager(storage, inject_time_prefix=False)
    tries = _storm(monkeypatch, storage, resetter, "append_entry", None)

    with pytest.raises(StaleEpochError, match=f"append to {KEY} met a reset on every try"):
        await manager.append_message(KEY, "user", "never lands")

    bound = transcript_module.PLAIN_APPEND_RETRY_SECONDS
    assert len(tries) == int(bound) + 1  # the first try, then one a second up to the bound
    assert await manager.get_transcript(KEY) == []


async def test_an_append_fenced_to_an_epoch_is_still_refused_at_once(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """Only the plain append retries: an entry written with the epoch its writer read is
    refused after one reset (that is what the fence is for)."""
    await manager.create(KEY)
    entry, epoch = await manager.prepare_message(KEY, "user", "fenced")
    await manager.reset(KEY)
    with pytest.raises(StaleEpochError):
        await storage.append_transcript_entry(entry, expected_epoch=epoch)
    assert await manager.get_transcript(KEY) == []
