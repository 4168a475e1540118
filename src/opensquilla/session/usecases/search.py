"""Transcript and title search (docs/search.md): by session id (upstream's three calls, the
storage's), by session key, and the one search call that picks its path.

A ``session_key`` narrows a search to the key's current generation, looked up in the same
unit of work (a missing key is ``SessionNotFoundError``); archived rows are searched only on
request. A query without a term searches nothing and returns ``[]`` without a statement.
Values arrive checked and keys canonical; one read unit of work per call.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from ..db.uow import Transaction, UnitOfWork
from ..keys import CanonicalKey
from ..models import INT64_MAX, SessionNode
from ..models.search import (
    RANK_WINDOW,
    SearchHit,
    SearchResults,
    fts_terms,
    like_terms,
    needs_unicode_folding,
    picks_words,
)
from .generations import GenerationCache
from .reads import owner_key


async def _merged(
    find: Callable[[bool], Awaitable[list[SearchHit]]],
    include_archived: bool,
    order: Callable[[SearchHit], Any],
    limit: int,
) -> list[SearchHit]:
    """The hits of the live table (and, ``include_archived``, the archive's), merged in
    ``order`` and cut to ``limit``."""
    tables = (False, True) if include_archived else (False,)
    found = [hit for archived in tables for hit in await find(archived)]
    return sorted(found, key=order)[:limit]


def _best_first(hit: SearchHit) -> tuple[float, int]:
    return (-(hit.rank or 0.0), -hit.id)


def _newest_first(hit: SearchHit) -> tuple[int, int]:
    return (-hit.created_at, -hit.id)


async def _words(
    tx: Transaction,
    query: str,
    scope: tuple[str, str] | None,
    limit: int,
    include_archived: bool,
    rank_window: int | None,
) -> list[SearchHit]:
    """Rows holding every ASCII word of ``query``, best first: the best ``limit`` of the
    newest ``rank_window`` matches of each table (``None``: of every match)."""
    terms = fts_terms(query)
    if not terms or limit == 0:
        return []

    def find(archived: bool) -> Awaitable[list[SearchHit]]:
        return tx.search.words(
            terms,
            archived=archived,
            session_key=scope[0] if scope else None,
            session_id=scope[1] if scope else None,
            window=rank_window,
            limit=limit,
        )

    return await _merged(find, include_archived, _best_first, limit)


async def _substrings(
    tx: Transaction,
    query: str,
    scope: tuple[str, str] | None,
    limit: int,
    include_archived: bool,
) -> list[SearchHit]:
    """Rows containing every whitespace-separated term of ``query`` (the first ten),
    newest first; Unicode case folded when the query has a cased non-ASCII letter."""
    terms = like_terms(query)
    if not terms or limit == 0:
        return []
    fold = needs_unicode_folding(query)

    def find(archived: bool) -> Awaitable[list[SearchHit]]:
        return tx.search.substrings(
            terms,
            fold=fold,
            archived=archived,
            session_key=scope[0] if scope else None,
            session_id=scope[1] if scope else None,
            limit=limit,
        )

    return await _merged(find, include_archived, _newest_first, limit)


async def _titles(tx: Transaction, query: str, limit: int) -> list[SessionNode]:
    terms = like_terms(query)
    if not terms or limit == 0:
        return []
    return await tx.search.titles(terms, fold=needs_unicode_folding(query), limit=limit)


@dataclass(frozen=True, slots=True)
class Scope:
    """Which transcript a search reads: generation ``session_id`` (the storage's), the
    current generation of ``key``, looked up in the search's unit of work (the manager's),
    or every session (neither)."""

    session_id: str | None = None
    key: CanonicalKey | None = None
    generations: GenerationCache | None = None

    async def resolve(self, tx: Transaction) -> tuple[str, str] | None:
        """``(session_key, session_id)`` of the generation searched, ``None`` for every
        session. A generation named by id alone searches under its owner's key (nothing
        carries the id: a key that matches no row)."""
        if self.key is None or self.generations is None:
            if self.session_id is None:
                return None
            key = await owner_key(tx, self.session_id)
            return (key if key is not None else ""), self.session_id
        node = self.generations.found(self.key, await tx.sessions.get(self.key))
        return node.session_key, node.session_id


def by_key(generations: GenerationCache, key: CanonicalKey | None) -> Scope:
    """The current generation of ``key`` (``None``: every session)."""
    return Scope(key=key, generations=generations)


async def words(
    uow: UnitOfWork,
    query: str,
    scope: Scope,
    limit: int,
    include_archived: bool,
    rank_window: int | None,
) -> list[SearchHit]:
    """The word search over ``scope``; a query without a term reads nothing but the
    scope's key (a missing one is ``SessionNotFoundError``)."""
    if (not fts_terms(query) or limit == 0) and scope.key is None:
        return []
    async with uow.read() as tx:
        resolved = await scope.resolve(tx)
        return await _words(tx, query, resolved, limit, include_archived, rank_window)


async def substrings(
    uow: UnitOfWork, query: str, scope: Scope, limit: int, include_archived: bool
) -> list[SearchHit]:
    """The substring search over ``scope``; a query without a term reads nothing but the
    scope's key (a missing one is ``SessionNotFoundError``)."""
    if (not like_terms(query) or limit == 0) and scope.key is None:
        return []
    async with uow.read() as tx:
        return await _substrings(tx, query, await scope.resolve(tx), limit, include_archived)


async def titles(uow: UnitOfWork, query: str, limit: int) -> list[SessionNode]:
    """Sessions where every term is in the display name, derived title, subject or label;
    newest activity first."""
    if not like_terms(query) or limit == 0:
        return []
    async with uow.read() as tx:
        return await _titles(tx, query, limit)


async def search(
    uow: UnitOfWork,
    generations: GenerationCache,
    query: str,
    key: CanonicalKey | None,
    limit: int,
    include_archived: bool,
) -> SearchResults:
    """Title matches (unless narrowed to one session), then message hits by the path the
    query needs (:func:`picks_words`): at most one hit per session, none from a session
    among the title matches, at most ``limit`` of each; one read unit of work."""
    path = "words" if picks_words(query) else "substring"
    # Enough hits that ``limit`` sessions survive the per-session cut in the usual case.
    wanted = min(limit * 5, INT64_MAX) if key is None else limit
    async with uow.read() as tx:
        found = await _titles(tx, query, limit) if key is None else []
        scope = await by_key(generations, key).resolve(tx)
        if path == "words":
            hits = await _words(tx, query, scope, wanted, include_archived, RANK_WINDOW)
        else:
            hits = await _substrings(tx, query, scope, wanted, include_archived)
    if key is not None:
        return SearchResults(path=path, sessions=[], messages=hits[:limit])
    seen = {node.session_key for node in found}
    messages: list[SearchHit] = []
    for hit in hits:
        if hit.session_key in seen:
            continue
        seen.add(hit.session_key)
        messages.append(hit)
        if len(messages) == limit:
            break
    return SearchResults(path=path, sessions=found, messages=messages)
