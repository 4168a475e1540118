"""Search statements over the transcript, its archive and session titles (docs/search.md).

The objects they use are revision 0003's: on SQLite the FTS5 tables ``transcript_fts`` and
``compacted_transcript_fts`` (``bm25`` ranks, ``snippet()`` marks); on PostgreSQL the
``search_vector`` column of the live table and the ``transcript_search_vector(content)``
expression of the archive (``ts_rank``), and the trigram indexes that serve ``ILIKE``.
Terms arrive already shaped by ``models/search.py``.
"""

# ruff: noqa: S608 (table names come from _FTS; every value is a bound parameter)

from __future__ import annotations

import contextlib
from contextlib import AbstractContextManager
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Select,
    Table,
    and_,
    bindparam,
    func,
    literal_column,
    or_,
    select,
    text,
)

from ...models import SessionNode
from ...models.search import (
    SearchHit,
    escape_like,
    sanitize_fts_query,
    substring_snippet,
    word_snippet,
)
from ..routing import cross_session
from ..rows import select_rows, to_models
from ..sql import is_postgres
from ..tables import compacted_transcript_entries as archive
from ..tables import sessions
from ..tables import transcript_entries as live
from ..types import MARKER
from .repository import Repository

# PostgreSQL's longest word in a tsvector; plainto_tsquery drops longer ones.
PG_MAX_WORD_BYTES = 2047

_HIT_COLUMNS = ("session_key", "session_id", "message_id", "role", "created_at")
TITLE_FIELDS = ("display_name", "derived_title", "subject", "label")

# SQLite: FTS5 table -> content table (``bm25`` is lower-better; we report its negation).
_FTS = {
    False: ("transcript_fts", "transcript_entries"),
    True: ("compacted_transcript_fts", "compacted_transcript_entries"),
}


def _sqlite_word_statement(archived: bool, session_id: str | None, window: int | None) -> Any:
    """One FTS5 statement: the matches (the newest ``window`` of them when given), each with
    its ``bm25`` and ``snippet()``, the best ``limit`` of those.

    With a window, the snippets are made inside the windowed subquery (at most ``window`` of
    them): an outer ``MATCH ... AND rowid IN (...)`` would walk every match of a common word
    again, since FTS5 does not take the rowid list. Without one, the best ``limit`` rowids
    are found first and only their snippets made."""
    fts, table = _FTS[archived]
    row_id = "e.original_entry_id" if archived else "e.id"
    scope = (
        " AND e.session_key = :session_key AND e.session_id = :session_id"
        if session_id is not None
        else ""
    )
    hit = (
        f"coalesce({row_id}, 0) AS id, e.id AS row_id, e.session_key, e.session_id, "
        f"e.message_id, e.role, e.created_at, e.content, "
        f"snippet({fts}, 0, '>>>', '<<<', '...', 48) AS snippet, -bm25({fts}) AS rank "
        f"FROM {fts} JOIN {table} e ON e.id = {fts}.rowid WHERE {fts} MATCH :query"
    )
    if window is not None:
        return text(
            f"SELECT * FROM (SELECT {hit}{scope} ORDER BY {fts}.rowid DESC LIMIT :window) "
            "ORDER BY rank DESC, row_id DESC LIMIT :limit"
        )
    best = (
        f"SELECT {fts}.rowid FROM {fts} JOIN {table} e ON e.id = {fts}.rowid "
        f"WHERE {fts} MATCH :query{scope} ORDER BY bm25({fts}), {fts}.rowid DESC LIMIT :limit"
    )
    # The outer read carries the scope too: every read of a child table names its key
    # (docs/scaling.md#keys-and-statements).
    return text(f"SELECT {hit}{scope} AND {fts}.rowid IN ({best}) ORDER BY rank DESC, e.id DESC")


def _scope(session_id: str | None, session_key: str | None) -> tuple[str, str] | None:
    """``(session_key, session_id)`` of a search of one generation, ``None`` for one across
    sessions."""
    if session_id is None:
        return None
    if session_key is None:
        raise ValueError("a search of one generation names its session_key")
    return session_key, session_id


def _of(table: Table, scope: tuple[str, str]) -> tuple[ColumnElement[bool], ...]:
    return table.c.session_key == scope[0], table.c.session_id == scope[1]


def _across(scope: tuple[str, str] | None) -> AbstractContextManager[None]:
    """A search across sessions is the ``search`` operation (it fans out under
    distribution); one generation's is keyed."""
    return cross_session("search") if scope is None else contextlib.nullcontext()


def _pg_words(table: Table) -> ColumnElement[Any]:
    if table is live:
        return literal_column("transcript_entries.search_vector")
    return func.transcript_search_vector(table.c.content)


def _pg_term(term: str) -> str:
    """A substring term as PostgreSQL stores text holding NUL (db/types.py): only such a
    text can contain one, and its backslashes are doubled there."""
    if "\x00" not in term:
        return term
    return term.replace(MARKER, "").replace("\\", "\\\\").replace("\x00", "\\0")


class SearchRepository(Repository):
    """Word, substring and title search statements on one connection."""

    __slots__ = ()

    async def words(
        self,
        terms: list[str],
        *,
        archived: bool,
        session_id: str | None,
        session_key: str | None = None,
        window: int | None,
        limit: int,
    ) -> list[SearchHit]:
        """Rows of the live table (or the archive) holding every term as a word, best first;
        the best ``limit`` of the newest ``window`` matches (``None``: of every match).
        Generation ``session_id`` of ``session_key`` only, or (``None``) a search across
        sessions (``search``)."""
        scope = _scope(session_id, session_key)
        if is_postgres(self.conn):
            return await self._pg_words(terms, archived, scope, window, limit)
        statement = _sqlite_word_statement(archived, session_id, window)
        values: dict[str, Any] = {"query": sanitize_fts_query(" ".join(terms)), "limit": limit}
        if scope is not None:
            values["session_key"], values["session_id"] = scope
        if window is not None:
            values["window"] = window
        with _across(scope):
            rows = (await self.conn.execute(statement, values)).all()
        return [
            # FTS5's snippet stops at a NUL character; such a text gets ours.
            _hit(row, word_snippet(row.content, terms), archived, float(row.rank))
            if row.content is not None and "\x00" in row.content
            else _hit(row, row.snippet or "", archived, float(row.rank))
            for row in rows
        ]

    async def _pg_words(
        self,
        terms: list[str],
        archived: bool,
        scope: tuple[str, str] | None,
        window: int | None,
        limit: int,
    ) -> list[SearchHit]:
        if any(len(term.encode()) > PG_MAX_WORD_BYTES for term in terms):
            return []  # no tsvector holds such a word (plainto_tsquery would drop it)
        table = archive if archived else live
        words = _pg_words(table)
        query = func.plainto_tsquery(literal_column("'simple'"), bindparam("query"))
        candidates = select(table.c.id).where(words.op("@@")(query))
        if scope is not None:
            candidates = candidates.where(*_of(table, scope))
        if window is not None:
            candidates = candidates.order_by(table.c.id.desc()).limit(window)
        found = candidates.subquery("found")
        rank = func.ts_rank(words, query).label("rank")
        statement = (
            select(*_hit_columns(table), table.c.content, rank)
            .join(found, found.c.id == table.c.id)
            .order_by(rank.desc(), table.c.id.desc())
            .limit(limit)
        )
        if scope is not None:
            statement = statement.where(table.c.session_key == scope[0])
        with _across(scope):
            rows = (await self.conn.execute(statement, {"query": " ".join(terms)})).all()
        return [
            _hit(row, word_snippet(row.content, terms), archived, float(row.rank)) for row in rows
        ]

    async def substrings(
        self,
        terms: list[str],
        *,
        fold: bool,
        archived: bool,
        session_id: str | None,
        session_key: str | None = None,
        limit: int,
    ) -> list[SearchHit]:
        """Rows of the live table (or the archive) containing every term, newest written
        first; ``fold``: compare Unicode-lowercased text (SQLite; PostgreSQL's ``ILIKE``
        always folds). Generation ``session_id`` of ``session_key`` only, or (``None``) a
        search across sessions (``search``)."""
        scope = _scope(session_id, session_key)
        table = archive if archived else live
        statement: Select[Any] = select(*_hit_columns(table), table.c.content)
        statement = statement.where(*self._contains_all(table.c.content, terms, fold))
        if scope is not None:
            statement = statement.where(*_of(table, scope))
        statement = statement.order_by(table.c.id.desc()).limit(limit)
        with _across(scope):
            rows = (await self.conn.execute(statement)).all()
        first = terms[0] if terms else ""
        return [_hit(row, substring_snippet(row.content, first), archived, None) for row in rows]

    async def titles(self, terms: list[str], *, fold: bool, limit: int) -> list[SessionNode]:
        """Sessions where every term is in one of :data:`TITLE_FIELDS`, newest activity
        first."""
        conditions = [
            or_(*(self._contains(sessions.c[field], term, fold) for field in TITLE_FIELDS))
            for term in terms
        ]
        query = (
            select_rows(sessions, self.conn)
            .where(and_(*conditions))
            .order_by(sessions.c.updated_at.desc(), sessions.c.session_key.desc())
            .limit(limit)
        )
        return to_models(SessionNode, self.conn.dialect.name, await self.conn.execute(query))

    def _contains_all(
        self, column: ColumnElement[Any], terms: list[str], fold: bool
    ) -> list[ColumnElement[bool]]:
        return [self._contains(column, term, fold) for term in terms]

    def _contains(self, column: ColumnElement[Any], term: str, fold: bool) -> ColumnElement[bool]:
        if is_postgres(self.conn):
            return column.ilike(escape_like(_pg_term(term)), escape="\\")
        # instr(), not LIKE: SQLite's LIKE stops at a NUL character and refuses patterns
        # over 50,000 bytes. Case: Unicode folding with py_lower, else ASCII (as LIKE's),
        # and none needed for a term without ASCII letters.
        target: ColumnElement[Any]
        if fold:
            target = func.py_lower(column)
        elif any(char.isascii() and char.isalpha() for char in term):
            target = func.lower(column)
        else:
            target = column
        return func.instr(target, term) > 0


def _hit_columns(table: Table) -> list[ColumnElement[Any]]:
    row_id = (
        func.coalesce(table.c.original_entry_id, 0).label("id") if table is archive else table.c.id
    )
    return [row_id, *(table.c[name] for name in _HIT_COLUMNS)]


def _hit(row: Any, snippet: str, archived: bool, rank: float | None) -> SearchHit:
    """The hit of a row read with :func:`_hit_columns`: its id and ``_HIT_COLUMNS``."""
    mapping = row._mapping
    columns = {name: mapping[name] for name in ("id", *_HIT_COLUMNS)}
    return SearchHit(**columns, snippet=snippet, archived=archived, rank=rank)
