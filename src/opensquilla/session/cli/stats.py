"""``stats``: row counts of the whole store and its reset archive files."""

from __future__ import annotations

import typer

from ..usecases.overview import StoreStats, require_store
from .options import Json
from .render.stats import STATS
from .runtime import dsn, open_manager, run


def stats(ctx: typer.Context, as_json: Json = False) -> None:
    """Counts: sessions, entries, archive, summaries by flush status, the repair queue."""
    STATS.show(run(lambda: _stats(dsn(ctx))), as_json)


async def _stats(dsn: str) -> StoreStats:
    """The call into the library (which would create a store where there is none)."""
    await require_store(dsn)
    async with open_manager(dsn, create=False) as manager:
        return await manager.stats()
