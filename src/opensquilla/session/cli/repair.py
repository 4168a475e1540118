"""``repair list|show|mark``: the queue of compactions whose memory flush was degraded."""

from __future__ import annotations

from typing import Annotated

import typer

from ..errors import SessionNotFoundError
from ..manager import SessionManager
from ..models import FlushReceiptStatus, SessionSummary
from .options import AgentFilter, Json, Limit, SummaryId
from .render.repair import MARKED, QUEUE, QUEUED, QueuedCompaction, RepairQueue
from .runtime import dsn, open_manager, run


def repair_list(
    ctx: typer.Context,
    agent: AgentFilter = None,
    limit: Limit = 50,
    as_json: Json = False,
) -> None:
    """Compactions whose memory flush was degraded or must be retried."""
    QUEUE.show(run(lambda: _list(dsn(ctx), agent, limit)), as_json)


def repair_show(ctx: typer.Context, summary_id: SummaryId, as_json: Json = False) -> None:
    """A queued compaction: its summary and the messages it folded away."""
    QUEUED.show(run(lambda: _show(dsn(ctx), summary_id)), as_json)


def repair_mark(
    ctx: typer.Context,
    summary_id: SummaryId,
    status: Annotated[FlushReceiptStatus, typer.Argument(help="The new flush receipt status.")],
    as_json: Json = False,
) -> None:
    """Record the outcome of a repair (e.g. 'safe' once the memory flush was redone)."""
    MARKED.show(run(lambda: _mark(dsn(ctx), summary_id, status)), as_json)


# -- calls into the library: one per command -------------------------------------------


async def _list(dsn: str, agent: str | None, limit: int) -> RepairQueue:
    async with open_manager(dsn, create=False) as manager:
        summaries = await manager.list_degraded_compactions(agent_id=agent, limit=limit)
        return RepairQueue(summaries, await manager.archive_report())


async def _show(dsn: str, summary_id: int) -> QueuedCompaction:
    async with open_manager(dsn, create=False) as manager:
        summary = await _summary(manager, summary_id)
        return QueuedCompaction(summary, await manager.get_compaction_preimage(summary))


async def _mark(dsn: str, summary_id: int, status: FlushReceiptStatus) -> SessionSummary:
    async with open_manager(dsn) as manager:
        summary = await _summary(manager, summary_id)
        await manager.mark_compaction_repair_status(summary, status.value)
        return summary


async def _summary(manager: SessionManager, summary_id: int) -> SessionSummary:
    summary = await manager.get_compaction(summary_id)
    if summary is None:
        raise SessionNotFoundError(f"no compaction summary with id {summary_id}")
    return summary
