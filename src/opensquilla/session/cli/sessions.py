"""``sessions list|show``: read the store, change nothing."""

from __future__ import annotations

from typing import Annotated

import typer

from ..errors import InvalidInputError, SessionNotFoundError
from ..models import SessionListCursor, SessionListPage, SessionStatus
from .options import (
    AgentFilter,
    Json,
    Limit,
    ListCursor,
    Offset,
    PageBefore,
    PageLimit,
    SessionKey,
)
from .render.sessions import (
    SESSION,
    SESSIONS,
    SessionDetail,
    SessionPage,
    TranscriptPageInfo,
    decode_position,
)
from .runtime import dsn, open_manager, run


def sessions_list(
    ctx: typer.Context,
    agent: AgentFilter = None,
    status: Annotated[
        SessionStatus | None, typer.Option("--status", help="Only sessions in this status.")
    ] = None,
    parent: Annotated[str | None, typer.Option("--parent", help="Children of this key.")] = None,
    limit: Limit = 50,
    offset: Offset = 0,
    cursor: ListCursor = None,
    as_json: Json = False,
) -> None:
    """List sessions, most recently updated first, a page at a time: when more follow,
    the last line (and "next_cursor" in --json) is the --cursor of the next page."""
    page = run(lambda: _list(dsn(ctx), agent, status, parent, limit, offset, cursor))
    SESSIONS.show(SessionPage(page.sessions, limit, offset, page.next_cursor), as_json)


def sessions_show(
    ctx: typer.Context,
    key: SessionKey,
    canonical: Annotated[
        bool, typer.Option("--canonical", help="Include the compacted archive.")
    ] = False,
    limit: PageLimit = None,
    before: PageBefore = None,
    as_json: Json = False,
) -> None:
    """Show a session: its fields, transcript, summaries and context states. With --limit
    (and --before), one page of the canonical transcript instead of all of it: when older
    messages exist, the last line (and "older" in --json) is the --before of the next page."""
    SESSION.show(run(lambda: _show(dsn(ctx), key, canonical, limit, before)), as_json)


DEFAULT_PAGE = 50  # messages per page when only --before is given


# -- calls into the library: one per command -------------------------------------------


async def _list(
    dsn: str,
    agent: str | None,
    status: SessionStatus | None,
    parent: str | None,
    limit: int,
    offset: int,
    cursor: str | None,
) -> SessionListPage:
    """A keyset page (``--limit`` sessions, at least one, after ``--cursor``); with
    ``--offset`` or ``--parent`` the offset listing, which has no next cursor."""
    status_value = status.value if status is not None else None
    if offset or parent is not None:
        if cursor is not None:
            raise InvalidInputError("--cursor cannot be combined with --offset or --parent")
        async with open_manager(dsn, create=False) as manager:
            nodes = await manager.list_sessions(
                agent_id=agent,
                status=status_value,
                limit=limit,
                offset=offset,
                parent_session_key=parent,
            )
        return SessionListPage(sessions=nodes, next_cursor=None, has_more=False)
    after = SessionListCursor.decode(cursor) if cursor is not None else None
    async with open_manager(dsn, create=False) as manager:
        return await manager.list_sessions_page(
            limit=limit, cursor=after, agent_id=agent, status=status_value
        )


async def _show(
    dsn: str, key: str, canonical: bool, limit: int | None, before: str | None
) -> SessionDetail:
    """The whole session, or with ``limit``/``before`` one canonical transcript page."""
    position = decode_position(before) if before is not None else None
    async with open_manager(dsn, create=False) as manager:
        node = await manager.get_session(key)
        if node is None:
            raise SessionNotFoundError(f"Session not found: {key}")
        page: TranscriptPageInfo | None = None
        if limit is not None or position is not None:
            found = await manager.get_canonical_transcript_page(
                node.session_key, limit=limit or DEFAULT_PAGE, before=position
            )
            transcript = found.entries
            page = TranscriptPageInfo(found.has_more, found.canonical_complete)
        elif canonical:
            transcript = await manager.get_canonical_transcript(node.session_key)
        else:
            transcript = await manager.get_transcript(node.session_key)
        return SessionDetail(
            node=node,
            canonical=canonical or page is not None,
            transcript=transcript,
            page=page,
            summaries=await manager.get_summaries(node.session_key),
            states=await manager.get_context_states(node.session_key, valid_only=False),
        )
