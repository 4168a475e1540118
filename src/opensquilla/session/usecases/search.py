"""Search by session key, and the one search call that picks its path (docs/search.md).

A ``session_key`` narrows a search to the key's current generation (a missing key is
``SessionNotFoundError``); archived rows are searched only on request.
"""

from __future__ import annotations

from ..models import INT64_MAX, SessionNode, check_flag, check_integer, check_optional_text
from ..models.search import RANK_WINDOW, SearchHit, SearchResults, picks_words
from ..storage import SessionStorage
from .generations import GenerationCache


async def _scope(generations: GenerationCache, session_key: str | None) -> str | None:
    key = check_optional_text("session_key", session_key)
    if key is None:
        return None
    return (await generations.require(key)).session_id


async def words(
    storage: SessionStorage,
    generations: GenerationCache,
    query: str,
    *,
    session_key: str | None,
    include_archived: bool,
    limit: int,
    rank_window: int | None = RANK_WINDOW,
) -> list[SearchHit]:
    session_id = await _scope(generations, session_key)
    return await storage.search_words(
        query,
        session_id,
        limit,
        include_archived=check_flag("include_archived", include_archived),
        rank_window=rank_window,
    )


async def substrings(
    storage: SessionStorage,
    generations: GenerationCache,
    query: str,
    *,
    session_key: str | None,
    include_archived: bool,
    limit: int,
) -> list[SearchHit]:
    session_id = await _scope(generations, session_key)
    return await storage.search_substrings(
        query,
        session_id,
        limit,
        include_archived=check_flag("include_archived", include_archived),
    )


async def search(
    storage: SessionStorage,
    generations: GenerationCache,
    query: str,
    *,
    session_key: str | None,
    include_archived: bool,
    limit: int,
) -> SearchResults:
    """Title matches (unless narrowed to one session), then message hits by the path the
    query needs (:func:`picks_words`): at most one hit per session, none from a session
    among the title matches, at most ``limit`` of each."""
    limit = check_integer("limit", limit, minimum=0, maximum=INT64_MAX)
    path = "words" if isinstance(query, str) and picks_words(query) else "substring"
    found = words if path == "words" else substrings
    titles: list[SessionNode] = []
    if session_key is None:
        titles = await storage.search_sessions_by_title(query, limit)
    # Enough hits that ``limit`` sessions survive the per-session cut in the usual case.
    hits = await found(
        storage,
        generations,
        query,
        session_key=session_key,
        include_archived=include_archived,
        limit=min(limit * 5, INT64_MAX) if session_key is None else limit,
    )
    if session_key is not None:
        return SearchResults(path=path, sessions=[], messages=hits[:limit])
    seen = {node.session_key for node in titles}
    messages: list[SearchHit] = []
    for hit in hits:
        if hit.session_key in seen:
            continue
        seen.add(hit.session_key)
        messages.append(hit)
        if len(messages) == limit:
            break
    return SearchResults(path=path, sessions=titles, messages=messages)
