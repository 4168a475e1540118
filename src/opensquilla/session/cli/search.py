"""``search``: title matches and transcript hits for a query (docs/search.md)."""

from __future__ import annotations

from typing import Annotated

import typer

from ..models.search import SearchResults
from .options import Json, Limit
from .render.search import SEARCH
from .runtime import dsn, open_manager, run


def search(
    ctx: typer.Context,
    query: Annotated[str, typer.Argument(help="Words or text to find.")],
    session: Annotated[
        str | None, typer.Option("--session", help="Only this session's messages.")
    ] = None,
    archived: Annotated[
        bool, typer.Option("--archived", help="Search the compacted archive too.")
    ] = False,
    limit: Limit = 20,
    as_json: Json = False,
) -> None:
    """Search sessions and messages: sessions whose title fields hold every term, then at
    most one message hit per other session. An ASCII query matches whole words, ranked best
    first; any other query matches substrings, newest first (docs/search.md)."""
    SEARCH.show(run(lambda: _search(dsn(ctx), query, session, archived, limit)), as_json)


async def _search(
    dsn: str, query: str, session_key: str | None, include_archived: bool, limit: int
) -> SearchResults:
    """The call into the library."""
    async with open_manager(dsn, create=False) as manager:
        return await manager.search(
            query, session_key=session_key, include_archived=include_archived, limit=limit
        )
