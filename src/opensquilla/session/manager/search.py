"""The manager's search calls (docs/search.md): one search that picks its path, and
upstream's three, by session key.

A part of :class:`SessionManager`, kept apart by job; one-line delegations to ``usecases/``.
"""

from __future__ import annotations

from ..models import SessionNode
from ..models.search import RANK_WINDOW, SearchHit, SearchResults
from ..storage import SessionStorage
from ..usecases import search
from ..usecases.generations import GenerationCache


class SearchCalls:
    """The search calls of the front door (see :class:`SessionManager`)."""

    _storage: SessionStorage
    _generations: GenerationCache

    async def search(
        self,
        query: str,
        *,
        session_key: str | None = None,
        include_archived: bool = False,
        limit: int = 20,
    ) -> SearchResults:
        """One search, the path chosen by the query: words (ranked) for ASCII, substrings
        (newest first) for anything else. Sessions whose title fields match come first,
        then at most one message hit per other session; with ``session_key``, only that
        session's hits."""
        return await search.search(
            self._storage,
            self._generations,
            query,
            session_key=session_key,
            include_archived=include_archived,
            limit=limit,
        )

    async def search_transcript(
        self,
        query: str,
        *,
        session_key: str | None = None,
        include_archived: bool = False,
        limit: int = 20,
        rank_window: int | None = RANK_WINDOW,
    ) -> list[SearchHit]:
        """Messages holding every ASCII word of ``query``, best first (upstream's FTS
        search; at most 20 terms)."""
        return await search.words(
            self._storage,
            self._generations,
            query,
            session_key=session_key,
            include_archived=include_archived,
            limit=limit,
            rank_window=rank_window,
        )

    async def search_transcript_like(
        self,
        query: str,
        *,
        session_key: str | None = None,
        include_archived: bool = False,
        limit: int = 20,
    ) -> list[SearchHit]:
        """Messages containing every term of ``query`` (CJK, any script; Unicode case
        folded), newest first (upstream's LIKE search; at most 10 terms)."""
        return await search.substrings(
            self._storage,
            self._generations,
            query,
            session_key=session_key,
            include_archived=include_archived,
            limit=limit,
        )

    async def search_sessions_by_title(self, query: str, *, limit: int = 20) -> list[SessionNode]:
        """Sessions whose display name, derived title, subject or label hold every term."""
        return await self._storage.search_sessions_by_title(query, limit)
