"""Reads of the transcript beyond the whole-list reads: recent rows, entries by message id,
batch counts and first user messages, canonical pages and coverage (docs/semantics.md#pages;
the coverage reads the archive's counts kept by the database, :data:`archive_counts`).

Also the canonical transcript as a query (:func:`canonical_query`: the archive, each row with
``id := original_entry_id``, merged with the live rows) and the transcript order. Mixed into
:class:`.transcript.TranscriptRepository`, whose connection it uses.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from sqlalchemy import (
    BigInteger,
    BindParameter,
    Column,
    ColumnElement,
    Integer,
    MetaData,
    Select,
    Table,
    Text,
    bindparam,
    case,
    exists,
    func,
    literal_column,
    select,
    true,
    tuple_,
    union_all,
)
from sqlalchemy.dialects import postgresql
from sqlalchemy.ext.asyncio import AsyncConnection

from ...models import (
    CANONICAL_FORK_PROOF_SCHEMA_VERSION,
    CanonicalTranscriptCoverage,
    Cursor,
    TranscriptEntry,
)
from ..routing import cross_session
from ..rows import TRANSCRIPT_COLUMNS, read_columns, to_models
from ..sql import chunks, is_postgres, window_binds
from ..tables import compacted_transcript_entries as archive
from ..tables import session_summaries as summaries
from ..tables import sessions
from ..tables import transcript_entries as live

LIVE_ORDER = (live.c.created_at.asc(), live.c.id.asc())

# Revision 0007: one row per (session_id, compaction_id) group of the archive (NULL a group
# of its own; 0010: per session_key too), kept exact by triggers on the archive; the store
# only reads it. Not one of the five tables: its own metadata, so export, import and the
# drift check never see it.
archive_counts = Table(
    "canonical_archive_counts",
    MetaData(),
    Column("id", BigInteger().with_variant(Integer(), "sqlite"), primary_key=True),
    # Revision 0010: the groups are (session_key, session_id, compaction_id), so a read
    # carries the key like every statement on a session's rows (docs/scaling.md).
    Column("session_key", Text, nullable=False),
    Column("session_id", Text, nullable=False),
    Column("compaction_id", Text),
    Column("archived", BigInteger, nullable=False),
    Column("unlinked", BigInteger, nullable=False),
)


def _archive_as_transcript(session_key: Any, session_id: Any, dialect_name: str) -> Select[Any]:
    """Archive rows shaped like live rows, ``id`` being the id they had when live."""
    by_name = {column.key: column for column in read_columns(archive, dialect_name)}
    columns: list[ColumnElement[Any]] = []
    for name in TRANSCRIPT_COLUMNS:
        if name == "id":
            columns.append(func.coalesce(archive.c.original_entry_id, 0).label("id"))
        else:
            columns.append(by_name[name])
    return select(*columns).where(
        archive.c.session_key == session_key, archive.c.session_id == session_id
    )


def _live_as_transcript(session_key: Any, session_id: Any, dialect_name: str) -> Select[Any]:
    return select(*read_columns(live, dialect_name)).where(
        live.c.session_key == session_key, live.c.session_id == session_id
    )


def canonical_query(session_key: str, session_id: str, dialect_name: str) -> Any:
    """The canonical transcript of ``session_id`` (stored under ``session_key``: both arms
    carry the key) as a subquery (archive + live)."""
    merged = union_all(
        _archive_as_transcript(session_key, session_id, dialect_name),
        _live_as_transcript(session_key, session_id, dialect_name),
    )
    return merged.subquery("canonical")


class TranscriptReads:
    """Bounded reads of the live transcript and the canonical one."""

    conn: AsyncConnection

    # -- other reads -------------------------------------------------------------------

    # Session ids per statement of the batch reads: each id is one bound parameter.
    COUNT_CHUNK = 500
    USER_CONTENT_CHUNK = 300

    async def find_canonical_entry(
        self, session_id: str, message_id: str, *, session_key: str
    ) -> TranscriptEntry | None:
        """The newest canonical row (archive or live) carrying ``message_id``."""
        merged = canonical_query(session_key, session_id, self.conn.dialect.name)
        query = (
            select(merged)
            .where(merged.c.message_id == message_id)
            .order_by(merged.c.created_at.desc(), merged.c.id.desc())
            .limit(1)
        )
        found = to_models(TranscriptEntry, self.conn.dialect.name, await self.conn.execute(query))
        return found[0] if found else None

    async def count_live_batch(self, session_ids: Sequence[str]) -> dict[str, int]:
        """Live rows per session id, every id of ``session_ids`` present (0 when none);
        one grouped statement per :attr:`COUNT_CHUNK` ids. About many sessions: a
        ``listing`` (it fans out under distribution)."""
        counts = dict.fromkeys(session_ids, 0)
        with cross_session("listing"):
            for chunk in chunks(list(counts), self.COUNT_CHUNK):
                query = (
                    select(live.c.session_id, func.count())
                    .where(live.c.session_id.in_(chunk))
                    .group_by(live.c.session_id)
                )
                for session_id, count in await self.conn.execute(query):
                    counts[session_id] = int(count)
        return counts

    async def first_user_contents(
        self, session_ids: Sequence[str], limit_per_session: int
    ) -> dict[str, list[str]]:
        """The contents of the first ``limit_per_session`` live ``user`` rows with
        non-empty content of each session id, in transcript order, every id present
        (``[]`` when none); one statement per :attr:`USER_CONTENT_CHUNK` ids, in which each
        session is one range scan of ``idx_transcript_session_cursor`` that stops at its
        ``limit_per_session``-th match (:func:`_first_user_rows`). About many sessions: a
        ``listing`` (it fans out under distribution)."""
        contents: dict[str, list[str]] = {session_id: [] for session_id in session_ids}
        if limit_per_session == 0:
            return contents
        postgres = is_postgres(self.conn)
        with cross_session("listing"):
            for chunk in chunks(list(contents), self.USER_CONTENT_CHUNK):
                values: dict[str, Any]
                if postgres:
                    query, values = _first_user_rows(0), {"session_ids": chunk}
                else:
                    query = _first_user_rows(len(chunk))
                    values = {f"session_id_{n}": session_id for n, session_id in enumerate(chunk)}
                values["per_session"] = limit_per_session
                for session_id, content in await self.conn.execute(query, values):
                    contents[session_id].append(content)
        return contents

    # -- pages and coverage ------------------------------------------------------------

    async def named_positions(
        self, session_id: str, positions: Sequence[Cursor], *, session_key: str
    ) -> list[bool]:
        """For each ``(created_at, id)``, whether it names a canonical row of ``session_id``
        (stored under ``session_key``): a live row with that ``created_at`` and id, or an
        archived row with that ``created_at`` and ``original_entry_id``. One statement;
        each test is an index probe."""
        if not positions:
            return []
        values: dict[str, Any] = {"session_key": session_key, "session_id": session_id}
        for n, (created_at, row_id) in enumerate(positions):
            values[f"created_at_{n}"], values[f"id_{n}"] = created_at, row_id
        row = (await self.conn.execute(_named_positions(len(positions)), values)).one()
        return [bool(value) for value in row]

    async def canonical_window(
        self,
        session_id: str,
        *,
        session_key: str,
        limit: int,
        position: Cursor | None = None,
        forward: bool = False,
    ) -> list[TranscriptEntry]:
        """Up to ``limit`` canonical rows of ``session_id`` (stored under ``session_key``)
        in travel order, one statement.

        ``forward``: the oldest rows after ``position`` (from the first row if ``None``),
        oldest first; otherwise the newest rows before ``position`` (from the last row if
        ``None``), newest first. ``position`` need not name a row. Each table is read on its
        own ``(session_id, created_at, id)`` index as a range scan bounded to ``limit`` rows
        in the travel direction; the two are merged, ordered and cut to ``limit``. One
        statement is one snapshot, so rows a concurrent compaction moves from the live table
        to the archive are seen exactly once. Archived rows without ``original_entry_id``
        (legacy; their generation reports incomplete) are shown with id 0 as in
        :meth:`list_canonical`, and ordered among same-millisecond rows as each backend
        sorts ``NULL``.
        """
        dialect = self.conn.dialect.name
        values = window_binds(session_key, session_id, limit, position)
        query = _canonical_window(dialect, forward, position is not None)
        return to_models(TranscriptEntry, dialect, await self.conn.execute(query, values))

    async def coverage(self, session_id: str, *, session_key: str) -> CanonicalTranscriptCoverage:
        """Whether the generation ``session_id`` of ``session_key`` has its whole canonical
        transcript
        (docs/semantics.md#pages), from its ``sessions`` row, its summaries and the counts
        of its archived rows per compaction (:data:`archive_counts`), in one statement:
        one probe per summary and per compaction, never a count of archived rows.
        ``(False, 0, False)`` when the key's row does not have that id."""
        query = _coverage_query()
        values = {"session_key": session_key, "session_id": session_id}
        row = (await self.conn.execute(query, values)).first()
        if row is None:
            return CanonicalTranscriptCoverage(False, 0, False)
        compacted = int(row.compactions)
        forked = bool(row.forked_from_parent)
        summary_count = int(row.summaries)
        proven = not forked or int(row.schema_version) >= CANONICAL_FORK_PROOF_SCHEMA_VERSION
        count_ok = summary_count >= compacted if forked else summary_count == compacted
        complete = (
            proven
            and count_ok
            and int(row.removed) == int(row.archived)
            and int(row.unlinked) == 0
            and int(row.mismatched) == 0
        )
        return CanonicalTranscriptCoverage(complete, compacted, forked)


# The statements of the per-turn reads are built once per shape, their values bound per
# call: building one (subqueries, a UNION, their column proxies) and computing its cache key
# cost more than running it on a page of 100 rows.


@functools.lru_cache(maxsize=8)
def _named_positions(count: int) -> Select[Any]:
    """The statement of :meth:`TranscriptReads.named_positions` for ``count`` positions;
    binds ``session_key``, ``session_id``, ``created_at_<n>`` and ``id_<n>``."""
    session_key: BindParameter[str] = bindparam("session_key")
    session_id: BindParameter[str] = bindparam("session_id")

    def named(n: int) -> ColumnElement[bool]:
        created_at = bindparam(f"created_at_{n}", type_=BigInteger)
        row_id = bindparam(f"id_{n}", type_=BigInteger)
        return exists().where(
            live.c.session_key == session_key,
            live.c.session_id == session_id,
            live.c.created_at == created_at,
            live.c.id == row_id,
        ) | exists().where(
            archive.c.session_key == session_key,
            archive.c.session_id == session_id,
            archive.c.created_at == created_at,
            archive.c.original_entry_id == row_id,
        )

    tests: list[Any] = [named(n).label(f"named_{n}") for n in range(count)]
    return select(*tests)


@functools.cache
def _canonical_window(dialect_name: str, forward: bool, bounded: bool) -> Select[Any]:
    """The statement of :meth:`TranscriptReads.canonical_window` for one shape; binds
    those of :func:`window_binds`."""
    session_key: BindParameter[str] = bindparam("session_key")
    session_id: BindParameter[str] = bindparam("session_id")
    limit = bindparam("window_limit", type_=BigInteger)
    live_rows = _live_as_transcript(session_key, session_id, dialect_name)
    archive_rows = _archive_as_transcript(session_key, session_id, dialect_name)
    live_key = (live.c.created_at, live.c.id)
    archive_key = (archive.c.created_at, archive.c.original_entry_id, archive.c.id)
    if bounded:
        bound = tuple_(
            bindparam("position_created_at", type_=BigInteger),
            bindparam("position_id", type_=BigInteger),
        )
        if forward:
            live_rows = live_rows.where(tuple_(*live_key) > bound)
            archive_rows = archive_rows.where(tuple_(*archive_key[:2]) > bound)
        else:
            live_rows = live_rows.where(tuple_(*live_key) < bound)
            archive_rows = archive_rows.where(tuple_(*archive_key[:2]) < bound)
    sides = [
        rows.order_by(*(c.asc() if forward else c.desc() for c in key)).limit(limit)
        for rows, key in ((live_rows, live_key), (archive_rows, archive_key))
    ]
    merged = union_all(*(select(side.subquery()) for side in sides)).subquery("window")
    order = (merged.c.created_at, merged.c.id)
    return select(merged).order_by(*(c.asc() if forward else c.desc() for c in order)).limit(limit)


@functools.cache
def _coverage_query() -> Select[Any]:
    """The statement of :meth:`TranscriptReads.coverage`; binds ``session_key`` and
    ``session_id`` (every table read by both: one session's partition or shard)."""
    session_key: BindParameter[str] = bindparam("session_key")
    session_id: BindParameter[str] = bindparam("session_id")
    s = sessions.c
    counts = archive_counts.c
    mine = (summaries.c.session_key == session_key) & (summaries.c.session_id == session_id)
    counted_here = (counts.session_key == session_key) & (counts.session_id == session_id)
    matching = (
        select(counts.archived)
        .where(counted_here, counts.compaction_id == summaries.c.compaction_id)
        .scalar_subquery()
    )
    mismatched = (
        (summaries.c.compaction_id.is_(None))
        | ((summaries.c.removed_count == 0) & (summaries.c.covered_through_id > 0))
        | (func.coalesce(matching, 0) != summaries.c.removed_count)
    )

    def total(column: Any, *where: ColumnElement[bool]) -> Any:
        return select(func.coalesce(func.sum(column), 0)).where(*where).scalar_subquery()

    return select(
        case((s.compaction_count > 0, s.compaction_count), else_=0).label("compactions"),
        s.forked_from_parent,
        s.schema_version,
        select(func.count())
        .select_from(summaries)
        .where(mine)
        .scalar_subquery()
        .label("summaries"),
        total(summaries.c.removed_count, mine).label("removed"),
        total(counts.archived, counted_here).label("archived"),
        total(counts.unlinked, counted_here).label("unlinked"),
        select(func.count())
        .select_from(summaries)
        .where(mine, mismatched)
        .scalar_subquery()
        .label("mismatched"),
    ).where(s.session_key == session_key, s.session_id == session_id)


@functools.cache
def _first_user_rows(arms: int) -> Select[Any]:
    """``(session_id, content)`` of the first ``:per_session`` live user rows with
    non-empty content of each wanted session, in transcript order (built once per shape).

    ``arms=0`` (PostgreSQL): the ids are one array parameter ``:session_ids``, each joined
    ``LATERAL`` to its limited scan. Otherwise (SQLite, which has no ``LATERAL``): a
    ``UNION ALL`` of ``arms`` limited scans, on ``:session_id_0`` ... (two parameters
    an arm: the constants are written inline, so 300 arms stay under the 999 parameters
    of SQLite before 3.32). A ``ROW_NUMBER`` window would rank every user row of every
    session before keeping the first few.
    """
    per_session = bindparam("per_session", type_=BigInteger)

    def firsts(session_id: Any) -> Select[Any]:
        return (
            select(live.c.session_id, live.c.content, live.c.created_at, live.c.id)
            .where(
                live.c.session_id == session_id,
                live.c.role == literal_column("'user'"),
                live.c.content.is_not(None),
                live.c.content != literal_column("''"),
            )
            .order_by(*LIVE_ORDER)
            .limit(per_session)
        )

    if arms == 0:
        wanted = func.unnest(bindparam("session_ids", type_=postgresql.ARRAY(Text)))
        ids = wanted.table_valued("session_id").render_derived(name="wanted")
        found = firsts(ids.c.session_id).lateral("firsts")
        return (
            select(found.c.session_id, found.c.content)
            .select_from(ids.join(found, true()))
            .order_by(found.c.created_at, found.c.id)
        )
    # SQLite takes no LIMIT in a compound SELECT's arm: each is wrapped in a subquery.
    scans = [
        firsts(bindparam(f"session_id_{n}", type_=Text)).subquery().select() for n in range(arms)
    ]
    merged = union_all(*scans).subquery("firsts")
    return select(merged.c.session_id, merged.c.content).order_by(merged.c.created_at, merged.c.id)


__all__ = ["TranscriptReads"]
