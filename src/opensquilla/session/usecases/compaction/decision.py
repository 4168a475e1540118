"""Whether ``compact_with_result`` would compact now, without running it: the same read and
the same plan, then the plan's decision (docs/compaction.md#needs-compaction).

One unit of work (the read's snapshot); no summariser call, no lease, no flight, no write.
"""

from __future__ import annotations

from ...compaction import CompactionConfig
from ...compaction.decision import CompactionDecision, decide
from ...db.uow import UnitOfWork
from ...keys import CanonicalKey
from .run import plan_for, read_source


async def needs_compaction(
    uow: UnitOfWork,
    key: CanonicalKey,
    context_window_tokens: int,
    config: CompactionConfig,
    custom_instructions: str | None,
    protected_boundary_message_id: str | None,
) -> CompactionDecision:
    """The decision of the plan ``compact_with_result`` would make from the source as it is
    now (its read: :func:`.run.read_source`; its plan: :func:`.run.plan_for`)."""
    node, live, context = await read_source(uow, key, config)
    plan = plan_for(
        node,
        live,
        context,
        context_window_tokens,
        config,
        custom_instructions,
        protected_boundary_message_id,
    )
    return decide(plan)


__all__ = ["needs_compaction"]
