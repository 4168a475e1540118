"""One conversation through the front door, with a message that must never be reported."""

from __future__ import annotations

from opensquilla.session import SessionManager
from opensquilla.session.compaction import CompactionConfig

KEY = "agent:main:observed"
SECRET = "sk-live-0bserve-me-n0t-4f9c2e"


async def converse(manager: SessionManager) -> None:
    """A session of eight messages (the first holds :data:`SECRET`), one read, one
    compaction that removes rows."""
    await manager.create(KEY)
    await manager.append_message(KEY, "user", f"my key is {SECRET} " + "x" * 400, token_count=200)
    for index in range(7):
        await manager.append_message(KEY, "user", f"old {index} " + "x" * 400, token_count=200)
    assert len(await manager.get_transcript(KEY)) == 8
    result = await manager.compact_with_result(KEY, 1_000, CompactionConfig())
    assert result.removed_count > 0
