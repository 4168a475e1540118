"""Search by session id: upstream's three calls with their shapes (docs/search.md), the
front door (arguments checked) over one use case each."""

from __future__ import annotations

from typing import Any

from ..db.lifecycle import StorageLifecycle
from ..models import SessionNode, check_flag, check_integer, check_optional_text, check_text
from ..models.checks import INT64_MAX
from ..models.search import RANK_WINDOW, SearchHit, sanitize_fts_query
from ..usecases import search


def _check(query: object, limit: object, session_id: object) -> tuple[str, int, str | None]:
    checked = check_text("query", query)
    count = check_integer("limit", limit, minimum=0, maximum=INT64_MAX)
    scope = check_optional_text("session_id", session_id)
    # Upstream filters by session only when the id is truthy.
    return checked, count, scope or None


class SearchOperations(StorageLifecycle):
    """Transcript and title search."""

    sanitize_fts_query = staticmethod(sanitize_fts_query)

    async def search_words(
        self,
        query: str,
        session_id: str | None = None,
        limit: int = 20,
        *,
        include_archived: bool = False,
        rank_window: int | None = RANK_WINDOW,
    ) -> list[SearchHit]:
        """Live rows (and with ``include_archived`` archived rows) holding every ASCII
        word of ``query``, best first: the best ``limit`` of the newest ``rank_window``
        matches of each table (``None``: of every match)."""
        query, limit, session_id = _check(query, limit, session_id)
        if rank_window is not None:
            rank_window = check_integer("rank_window", rank_window, minimum=1)
        archived = check_flag("include_archived", include_archived)
        scope = search.Scope(session_id)
        return await search.words(self.uow, query, scope, limit, archived, rank_window)

    async def search_substrings(
        self,
        query: str,
        session_id: str | None = None,
        limit: int = 20,
        *,
        include_archived: bool = False,
    ) -> list[SearchHit]:
        """Live rows (and with ``include_archived`` archived rows) containing every
        whitespace-separated term of ``query`` (the first ten), newest first; Unicode case
        folded when the query has a cased non-ASCII letter."""
        query, limit, session_id = _check(query, limit, session_id)
        archived = check_flag("include_archived", include_archived)
        return await search.substrings(self.uow, query, search.Scope(session_id), limit, archived)

    async def search_transcript(
        self,
        query: str,
        session_id: str | None = None,
        limit: int = 20,
        *,
        include_archived: bool = False,
        rank_window: int | None = RANK_WINDOW,
    ) -> list[dict[str, Any]]:
        """Upstream's word search: :meth:`search_words` as dicts (``id``, ``session_key``,
        ``role``, ``created_at``, ``snippet``, and ours: ``session_id``, ``message_id``,
        ``archived``, ``rank``)."""
        hits = await self.search_words(
            query, session_id, limit, include_archived=include_archived, rank_window=rank_window
        )
        return [hit.as_dict() for hit in hits]

    async def search_transcript_like(
        self,
        query: str,
        session_id: str | None = None,
        limit: int = 20,
        *,
        include_archived: bool = False,
    ) -> list[dict[str, Any]]:
        """Upstream's substring search: :meth:`search_substrings` as dicts."""
        hits = await self.search_substrings(
            query, session_id, limit, include_archived=include_archived
        )
        return [hit.as_dict() for hit in hits]

    async def search_sessions_by_title(self, query: str, limit: int = 20) -> list[SessionNode]:
        """Sessions where every term (as :meth:`search_substrings` takes them) is in the
        display name, derived title, subject or label; newest activity first."""
        query, limit, _ = _check(query, limit, None)
        return await search.titles(self.uow, query, limit)
