"""The manager's search calls (docs/search.md): one search that picks its path, and
upstream's three, by session key.

A part of :class:`SessionManager`, kept apart by job: the front door (the options checked
once, ``models.search.check_search_options``) over one use case of ``usecases/`` each.
"""

from __future__ import annotations

from typing import Unpack

from ..models import SessionNode
from ..models.search import (
    SearchHit,
    SearchOptions,
    SearchResults,
    WordSearchOptions,
    check_search_options,
)
from ..storage import SessionStorage
from ..usecases import search
from ..usecases.generations import GenerationCache


class SearchCalls:
    """The search calls of the front door (see :class:`SessionManager`)."""

    _storage: SessionStorage
    _generations: GenerationCache

    async def search(self, query: str, **options: Unpack[SearchOptions]) -> SearchResults:
        """One search, the path chosen by the query: words (ranked) for ASCII, substrings
        (newest first) for anything else. Sessions whose title fields match come first,
        then at most one message hit per other session; with ``session_key``, only that
        session's hits. Options: ``session_key`` (``None``), ``include_archived``
        (``False``), ``limit`` (20)."""
        scope = check_search_options("search", query, options, SearchOptions)
        return await search.search(
            self._storage.uow, self._generations, query, scope.key, scope.limit, scope.archived
        )

    async def search_transcript(
        self, query: str, **options: Unpack[WordSearchOptions]
    ) -> list[SearchHit]:
        """Messages holding every ASCII word of ``query``, best first (upstream's FTS
        search; at most 20 terms). Options: :meth:`search`'s and ``rank_window`` (the newest
        matches ranked, ``RANK_WINDOW`` by default; ``None``: every match)."""
        scope = check_search_options("search_transcript", query, options, WordSearchOptions)
        within = search.by_key(self._generations, scope.key)
        return await search.words(
            self._storage.uow, query, within, scope.limit, scope.archived, scope.rank_window
        )

    async def search_transcript_like(
        self, query: str, **options: Unpack[SearchOptions]
    ) -> list[SearchHit]:
        """Messages containing every term of ``query`` (CJK, any script; Unicode case
        folded), newest first (upstream's LIKE search; at most 10 terms). Options:
        :meth:`search`'s."""
        scope = check_search_options("search_transcript_like", query, options, SearchOptions)
        within = search.by_key(self._generations, scope.key)
        return await search.substrings(
            self._storage.uow, query, within, scope.limit, scope.archived
        )

    async def search_sessions_by_title(self, query: str, *, limit: int = 20) -> list[SessionNode]:
        """Sessions whose display name, derived title, subject or label hold every term."""
        return await self._storage.search_sessions_by_title(query, limit)
