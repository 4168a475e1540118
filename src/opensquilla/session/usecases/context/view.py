"""The prompt's view of a session: latest summary plus the newest live messages that fit.

One snapshot read (docs/semantics.md#context-view): the session row, its newest summary and
the live transcript read backwards in batches until the budget is spent, so the cost
follows the budget, not the transcript's length. After the first batch, each is sized by
the tokens per message seen so far (:func:`next_batch`): a view reads about the rows it
returns, not up to four times as many.
"""

from __future__ import annotations

import math

from ...compaction.tokens import entry_tokens, estimate_tokens
from ...compaction.tools import is_tool_result
from ...db.uow import UnitOfWork
from ...errors import SessionNotFoundError
from ...keys import CanonicalKey
from ...models import TranscriptEntry
from ...models.context_view import ContextView

FIRST_BATCH = 64
MAX_BATCH = 4096
# Read this much more than the average message size predicts will fit (sizes vary).
BATCH_MARGIN = 1.25


def next_batch(batch: int, rows: int, used: int, budget: int) -> int:
    """The rows to read next, after ``rows`` messages fitted in ``used`` of ``budget``
    tokens: what the rest of the budget holds at their average size, with a margin, from
    :data:`FIRST_BATCH` to :data:`MAX_BATCH`; four times ``batch`` while messages cost
    nothing (empty ones). Only the number of statements depends on it, never the view."""
    if rows == 0 or used == 0:
        return min(batch * 4, MAX_BATCH)
    wanted = math.ceil((budget - used) * rows / used * BATCH_MARGIN) + 1
    return max(FIRST_BATCH, min(wanted, MAX_BATCH))


def turn_start(entries: list[TranscriptEntry]) -> int:
    """Where a view cut out of a longer transcript may begin: the first ``user`` message,
    else the first message that is not a tool result (a result never loses its call);
    ``len(entries)`` when neither exists."""
    for index, entry in enumerate(entries):
        if entry.role == "user":
            return index
    for index, entry in enumerate(entries):
        if not is_tool_result(entry.__dict__):
            return index
    return len(entries)


async def context_view(uow: UnitOfWork, key: CanonicalKey, max_tokens: int) -> ContextView:
    """The latest summary and the newest live messages fitting ``max_tokens`` (the summary
    counts against it), on a turn boundary; ``SessionNotFoundError`` for a missing key."""
    async with uow.snapshot() as tx:
        node = await tx.sessions.get(key)
        if node is None:
            raise SessionNotFoundError(f"Session not found: {key}")
        summary = await tx.summaries.latest(node.session_id, session_key=node.session_key)
        summary_tokens = estimate_tokens(summary.summary_text) if summary is not None else 0
        budget = max(0, max_tokens - summary_tokens)
        fitted: list[tuple[TranscriptEntry, int]] = []  # newest first
        used = 0
        truncated = False
        before: tuple[int, int] | None = None
        batch = FIRST_BATCH
        while not truncated:
            rows = await tx.transcript.live_tail(
                node.session_id, batch, session_key=node.session_key, before=before
            )
            for entry in reversed(rows):
                size = entry_tokens(entry.__dict__)
                if used + size > budget:
                    truncated = True
                    break
                used += size
                fitted.append((entry, size))
            if len(rows) < batch:
                break
            assert rows[0].id is not None
            before = (rows[0].created_at, rows[0].id)
            batch = next_batch(batch, len(fitted), used, budget)
    fitted.reverse()
    messages = [entry for entry, _ in fitted]
    start = turn_start(messages) if truncated else 0
    return ContextView(
        session_key=key,
        session_id=node.session_id,
        epoch=node.epoch,
        summary=summary,
        messages=messages[start:],
        max_tokens=max_tokens,
        summary_tokens=summary_tokens,
        budget_tokens=budget,
        message_tokens=sum(size for _, size in fitted[start:]),
        truncated=truncated,
    )


__all__ = ["context_view", "next_batch", "turn_start"]
