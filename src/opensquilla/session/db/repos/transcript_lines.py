"""The lean read of the live transcript: six columns of each row (or two: ``id`` and
``metadata``) as a :class:`TranscriptLine` (``SessionManager.get_transcript_lines``,
docs/reading.md#transcript-lines).

A framework integration keeps its own object whole in each entry's ``metadata`` and reads
back little else; :meth:`.transcript.TranscriptRepository.list_live` reads, decodes and
builds all twenty columns of every row into a record. This read leaves out the fourteen it
never uses (the driver makes a value of each column of each row, which costs about the
same whatever the column; the JSON of ``turn_usage``/``turn_context`` is decoded besides)
and makes each row one named tuple. :meth:`TranscriptLineReads.current_lines` also finds
the key's current generation and its latest summary's id in the same statement, so that
they agree with the rows. Mixed into :class:`.transcript.TranscriptRepository`,
whose connection it uses.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from sqlalchemy import (
    BigInteger,
    BindParameter,
    ColumnElement,
    Select,
    bindparam,
    exists,
    null,
    select,
)
from sqlalchemy.engine import CursorResult
from sqlalchemy.ext.asyncio import AsyncConnection

from ...models import TranscriptEntry, TranscriptLine
from ...support.gcpause import gc_paused
from ..rows import driver_converters, read_columns
from ..tables import session_summaries as summaries
from ..tables import sessions
from ..tables import transcript_entries as live
from .summaries import LATEST_ORDER

#: The columns of a line, in :class:`TranscriptLine`'s order (its fields' names).
LINE_COLUMNS: tuple[str, ...] = TranscriptLine._fields
# The columns whose driver values may need converting (``rows.driver_converters``).
_CONVERTED = ("content", "tool_calls", "metadata")
# The columns a ``metadata_only`` read takes.
_METADATA_COLUMNS = ("id", "metadata")


def _lines(rows: Iterable[Sequence[Any]], converters: dict[str, Callable[[Any], Any]]) -> Any:
    """The driver's rows (:data:`LINE_COLUMNS` and the summary id) as lines, each value
    converted as a record's is (``None`` stays ``None``; a column with no converter is
    taken as it is). ``tuple.__new__`` of the named tuple's class makes the line from the
    tuple display in C (``_make`` is a Python call)."""
    text = converters.get("content")
    calls = converters.get("tool_calls")
    meta = converters.get("metadata")
    new, line = tuple.__new__, TranscriptLine
    return [
        new(
            line,
            (
                row_id,
                role,
                content if content is None or text is None else text(content),
                tool_calls if tool_calls is None or calls is None else calls(tool_calls),
                tool_call_id,
                metadata if metadata is None or meta is None else meta(metadata),
            ),
        )
        for row_id, role, content, tool_calls, tool_call_id, metadata, _ in rows
    ]


def _metadata_lines(
    rows: Iterable[Sequence[Any]], converters: dict[str, Callable[[Any], Any]]
) -> Any:
    """:func:`_lines` of rows of ``id``, ``metadata`` and the summary id alone: the other
    fields ``None`` (``metadata`` always has its converter: it is JSON text)."""
    meta = converters["metadata"]
    new, line = tuple.__new__, TranscriptLine
    return [
        new(line, (row_id, None, None, None, None, None if value is None else meta(value)))
        for row_id, value, _ in rows
    ]


def _latest_summary_id(session_key: Any, session_id: Any) -> Any:
    """The id of the generation's newest summary (``summaries.LATEST_ORDER``), or NULL."""
    return (
        select(summaries.c.id)
        .where(summaries.c.session_key == session_key, summaries.c.session_id == session_id)
        .order_by(*LATEST_ORDER)
        .limit(1)
        .scalar_subquery()
    )


@functools.cache
def _lines_query(dialect_name: str, tail: bool, current: bool, metadata_only: bool) -> Select[Any]:
    """The statement of :meth:`TranscriptLineReads.live_lines` (``current=False``: binds
    ``session_key`` and ``session_id``) or of :meth:`TranscriptLineReads.current_lines`
    (binds ``session_key``: the generation is the key's current one). A seventh column is
    the id of the generation's latest summary, the same on every row (``NULL`` in
    :meth:`~TranscriptLineReads.live_lines`'); ``tail`` binds ``tail_limit`` and reads
    newest first; ``metadata_only`` reads ``id`` and ``metadata`` alone. Built once per
    shape."""
    key: BindParameter[str] = bindparam("session_key")
    by_name = {column.name: column for column in read_columns(live, dialect_name)}
    names = _METADATA_COLUMNS if metadata_only else LINE_COLUMNS
    columns: list[ColumnElement[Any]] = [by_name[name] for name in names]
    generation: Any = bindparam("session_id")
    summary_id: Any = null()
    if current:
        generation = (
            select(sessions.c.session_id).where(sessions.c.session_key == key).scalar_subquery()
        )
        summary_id = _latest_summary_id(key, generation)
    columns.append(summary_id.label("summary_id"))
    query = select(*columns).where(live.c.session_key == key, live.c.session_id == generation)
    if not tail:
        return query.order_by(live.c.created_at.asc(), live.c.id.asc())
    return query.order_by(live.c.created_at.desc(), live.c.id.desc()).limit(
        bindparam("tail_limit", type_=BigInteger)
    )


@functools.cache
def _anchor_query() -> Select[Any]:
    """The statement of :meth:`TranscriptLineReads.current_anchor`; binds ``session_key``."""
    key: BindParameter[str] = bindparam("session_key")
    generation = sessions.c.session_id
    has_rows = exists().where(live.c.session_key == key, live.c.session_id == generation)
    return select(
        has_rows.label("has_rows"), _latest_summary_id(key, generation).label("summary_id")
    ).where(sessions.c.session_key == key)


class TranscriptLineReads:
    """The live transcript as :class:`TranscriptLine` rows."""

    conn: AsyncConnection

    async def live_lines(
        self,
        session_id: str,
        *,
        session_key: str,
        limit: int | None = None,
        metadata_only: bool = False,
    ) -> list[TranscriptLine]:
        """The live rows of ``session_id`` (stored under ``session_key``) as lines, oldest
        first; with ``limit``, the newest ``limit`` of them (a backward range scan of
        ``(session_id, created_at, id)``, reversed); ``metadata_only``: each line's
        ``id`` and ``metadata`` alone read, its other fields ``None``. One statement."""
        values: dict[str, Any] = {"session_key": session_key, "session_id": session_id}
        lines, _ = await self._read(values, limit, current=False, metadata_only=metadata_only)
        return lines

    async def current_lines(
        self, session_key: str, *, limit: int | None = None, metadata_only: bool = False
    ) -> tuple[list[TranscriptLine], int | None]:
        """:meth:`live_lines` of the current generation of ``session_key`` (none when the
        key has no session), and the id of that generation's latest summary (``None``
        when it has none, or when there are no lines: see :meth:`current_anchor`), from
        one statement."""
        values = {"session_key": session_key}
        return await self._read(values, limit, current=True, metadata_only=metadata_only)

    async def current_anchor(self, session_key: str) -> tuple[bool, int | None] | None:
        """Whether the current generation of ``session_key`` has live rows, and its
        latest summary's id; ``None`` when the key has no session. One statement."""
        row = (await self.conn.execute(_anchor_query(), {"session_key": session_key})).first()
        if row is None:
            return None
        return bool(row.has_rows), None if row.summary_id is None else int(row.summary_id)

    async def _read(
        self, values: dict[str, Any], limit: int | None, *, current: bool, metadata_only: bool
    ) -> tuple[list[TranscriptLine], int | None]:
        dialect = self.conn.dialect.name
        if limit is not None:
            values["tail_limit"] = limit
        query = _lines_query(dialect, limit is not None, current, metadata_only)
        result: CursorResult[Any] = await self.conn.execute(query, values)
        converters = dict(driver_converters(TranscriptEntry, LINE_COLUMNS, dialect))
        if not set(converters) <= set(_CONVERTED):  # a column type changed: convert it here
            raise AssertionError(f"unexpected converters: {sorted(converters)}")
        build, width = (_metadata_lines, 2) if metadata_only else (_lines, len(LINE_COLUMNS))
        try:
            with gc_paused():
                rows = result.cursor.fetchall()
                summary_id = rows[0][width] if rows else None  # the column after the line's
                lines: list[TranscriptLine] = build(rows, converters)
                del rows  # freed now, not walked by the collection the pause put off
        finally:
            result.close()
        if limit is not None:
            lines.reverse()
        return lines, None if summary_id is None else int(summary_id)


__all__ = ["LINE_COLUMNS", "TranscriptLineReads"]
