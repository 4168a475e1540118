"""Transcript search: what a query becomes, and what a hit is (docs/search.md).

Two paths, as upstream has them (HEAD-FEATURES §4):

* **words** (:func:`sanitize_fts_query`): the ASCII letters and digits of the query, split
  into at most :data:`FTS_MAX_TERMS` terms that must all occur as whole words; ranked best
  first;
* **substring** (:func:`like_terms`): at most :data:`LIKE_MAX_TERMS` whitespace-separated
  terms that must all occur anywhere in the text, Unicode case folded when the query has a
  cased non-ASCII letter; newest first. The only path for CJK and other non-ASCII text.

:func:`picks_words` is the choice one search call makes. Pure functions, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypedDict

from ..keys import CanonicalKey, canonicalize_session_key
from .checks import (
    INT64_MAX,
    check_flag,
    check_integer,
    check_optional_text,
    check_text,
    refuse_unknown_fields,
)
from .records import SessionNode

FTS_MAX_TERMS = 20
LIKE_MAX_TERMS = 10
SNIPPET_CONTEXT = 40
"""Characters shown each side of a substring hit."""
NO_HIT_PREVIEW = 80
RANK_WINDOW = 1000
"""Word hits ranked per search by default: the newest this many matches of the query (every
match when it has fewer). Ranking every match of a word in most rows costs a ranking per
row; pass ``rank_window=None`` for that."""
EMPTY_FTS_QUERY = '""'


class SearchOptions(TypedDict, total=False):
    """The keyword options of the manager's searches, declared once for every layer
    (``Unpack[SearchOptions]``): ``session_key`` (``None``, the default: every session),
    ``include_archived`` (``False``), ``limit`` (20)."""

    session_key: str | None
    include_archived: bool
    limit: int


class WordSearchOptions(SearchOptions, total=False):
    """:class:`SearchOptions` and the word search's ``rank_window`` (default
    :data:`RANK_WINDOW`; ``None``: rank every match)."""

    rank_window: int | None


@dataclass(frozen=True, slots=True)
class SearchScope:
    """:class:`WordSearchOptions` checked, defaults applied, the key canonical."""

    key: CanonicalKey | None
    limit: int
    archived: bool
    rank_window: int | None


def check_search_options(
    call: str, query: object, options: Mapping[str, Any], kind: Any
) -> SearchScope:
    """The front door's one check of a search's query and options (``kind``, the
    ``TypedDict`` the call takes: an option it does not declare is a ``TypeError``)."""
    refuse_unknown_fields(call, options, kind)
    check_text("query", query)
    limit = check_integer("limit", options.get("limit", 20), minimum=0, maximum=INT64_MAX)
    key = check_optional_text("session_key", options.get("session_key"))
    archived = check_flag("include_archived", options.get("include_archived", False))
    rank_window = options.get("rank_window", RANK_WINDOW)
    if rank_window is not None:
        rank_window = check_integer("rank_window", rank_window, minimum=1)
    canonical = None if key is None else canonicalize_session_key(key)
    return SearchScope(canonical, limit, archived, rank_window)


_NOT_ASCII_ALNUM = re.compile(r"[^A-Za-z0-9\s]")


def sanitize_fts_query(raw: str) -> str:
    """Upstream's FTS query: characters other than ASCII letters, digits and whitespace
    become spaces; the first :data:`FTS_MAX_TERMS` terms, each double-quoted, space-joined
    (every term must match; ``AND``, ``NEAR`` and ``*`` are plain words). ``'""'`` when no
    term is left, which searches nothing."""
    terms = fts_terms(raw)
    if not terms:
        return EMPTY_FTS_QUERY
    return " ".join(f'"{term}"' for term in terms)


def fts_terms(raw: str) -> list[str]:
    """The terms of :func:`sanitize_fts_query`, unquoted."""
    return _NOT_ASCII_ALNUM.sub(" ", raw).split()[:FTS_MAX_TERMS]


def needs_unicode_folding(raw: str) -> bool:
    """Whether the query has a cased non-ASCII character (its lower and upper forms differ),
    so the text must be Unicode-lowercased before matching."""
    return any(ord(char) > 127 and char.lower() != char.upper() for char in raw)


def like_terms(raw: str) -> list[str]:
    """The substring terms: the first :data:`LIKE_MAX_TERMS` whitespace-separated words,
    lowercased (not yet escaped for ``LIKE``)."""
    return [term.lower() for term in raw.split()[:LIKE_MAX_TERMS]]


def escape_like(term: str) -> str:
    """``%term%`` with ``\\``, ``%`` and ``_`` escaped (the escape character is ``\\``)."""
    escaped = term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def picks_words(raw: str) -> bool:
    """The path one search call takes: words for a query of ASCII only (which has a term),
    the substring path for anything with a non-ASCII character."""
    return raw.isascii() and bool(fts_terms(raw))


def substring_snippet(text: str | None, first_term: str) -> str:
    """Upstream's substring snippet: the first case-insensitive occurrence of the query's
    first term marked ``>>>``/``<<<`` with :data:`SNIPPET_CONTEXT` characters each side
    (``...`` where cut); no occurrence: the first :data:`NO_HIT_PREVIEW` characters."""
    text = text or ""
    at = text.lower().find(first_term.lower()) if first_term else -1
    if at < 0:
        return text[:NO_HIT_PREVIEW]
    end = at + len(first_term)
    start, stop = max(0, at - SNIPPET_CONTEXT), min(len(text), end + SNIPPET_CONTEXT)
    return (
        ("..." if start > 0 else "")
        + text[start:at]
        + ">>>"
        + text[at:end]
        + "<<<"
        + text[end:stop]
        + ("..." if stop < len(text) else "")
    )


_WORD = re.compile(r"[A-Za-z0-9]+")


def word_snippet(text: str | None, terms: list[str], width: int = 48) -> str:
    """A word hit's snippet where the database does not make one (PostgreSQL): up to
    ``width`` words around the first word equal to a term (case-insensitive), that word
    marked ``>>>``/``<<<``, ``...`` where cut; FTS5's ``snippet()`` makes it on SQLite."""
    text = text or ""
    wanted = {term.lower() for term in terms}
    words = list(_WORD.finditer(text))
    hit = next((i for i, word in enumerate(words) if word.group().lower() in wanted), None)
    if hit is None:
        return text[:NO_HIT_PREVIEW]
    first = max(0, hit - width // 4)
    last = min(len(words), first + width) - 1
    begin = words[first].start() if first > 0 else 0
    end = words[last].end() if last < len(words) - 1 else len(text)
    match = words[hit]
    return (
        ("..." if begin > 0 else "")
        + text[begin : match.start()]
        + ">>>"
        + match.group()
        + "<<<"
        + text[match.end() : end]
        + ("..." if end < len(text) else "")
    )


@dataclass(frozen=True, slots=True)
class SearchHit:
    """One transcript row that matched.

    ``id`` is the row's transcript id (an archived row's id from when it was live, as on a
    canonical page); ``archived`` says which table it came from. ``rank``: for word hits
    the relevance (higher is better, comparable within one search), for substring hits
    ``None``. ``as_dict()`` gives upstream's dict (``id``, ``session_key``, ``role``,
    ``created_at``, ``snippet``) with the other fields added."""

    id: int
    session_key: str
    session_id: str
    message_id: str
    role: str
    created_at: int
    snippet: str
    archived: bool = False
    rank: float | None = None

    def as_dict(self) -> dict[str, object]:
        return {
            "id": self.id,
            "session_key": self.session_key,
            "role": self.role,
            "created_at": self.created_at,
            "snippet": self.snippet,
            "session_id": self.session_id,
            "message_id": self.message_id,
            "archived": self.archived,
            "rank": self.rank,
        }


@dataclass(frozen=True, slots=True)
class SearchResults:
    """What one search call found: sessions whose title fields match, then message hits
    (best first for words, newest first for substrings), at most one per session and none
    from a session already among ``sessions``. ``path`` is ``"words"`` or ``"substring"``."""

    path: str
    sessions: list[SessionNode]
    messages: list[SearchHit]


__all__ = [
    "EMPTY_FTS_QUERY",
    "FTS_MAX_TERMS",
    "LIKE_MAX_TERMS",
    "RANK_WINDOW",
    "SearchHit",
    "SearchResults",
    "escape_like",
    "fts_terms",
    "like_terms",
    "needs_unicode_folding",
    "picks_words",
    "sanitize_fts_query",
    "substring_snippet",
    "word_snippet",
]
