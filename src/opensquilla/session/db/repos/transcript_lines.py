"""The lean read of the live transcript: six columns of each row as a
:class:`TranscriptLine` (``SessionManager.get_transcript_lines``, docs/reading.md).

A framework integration keeps its own object whole in each entry's ``metadata`` and reads
back little else; :meth:`.transcript.TranscriptRepository.list_live` reads, decodes and
builds all twenty columns of every row into a record. This read leaves out the fourteen it
never uses (a third of the driver's values, the JSON of ``turn_usage``/``turn_context``)
and makes each row one named tuple. Mixed into :class:`.transcript.TranscriptRepository`,
whose connection it uses.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from sqlalchemy import BigInteger, Select, bindparam, select
from sqlalchemy.ext.asyncio import AsyncConnection

from ...models import TranscriptEntry, TranscriptLine
from ...support.gcpause import gc_paused
from ..rows import driver_converters, read_columns
from ..tables import transcript_entries as live

#: The columns of a line, in :class:`TranscriptLine`'s order (its fields' names).
LINE_COLUMNS: tuple[str, ...] = TranscriptLine._fields
# The columns whose driver values may need converting (``rows.driver_converters``).
_CONVERTED = ("content", "tool_calls", "metadata")


def _same(value: Any) -> Any:
    return value


def _lines(rows: Iterable[Sequence[Any]], converters: dict[str, Callable[[Any], Any]]) -> Any:
    """The driver's rows (in :data:`LINE_COLUMNS`' order) as lines, each value converted
    as a record's is (``None`` stays ``None``)."""
    text = converters.get("content", _same)
    calls = converters.get("tool_calls", _same)
    meta = converters.get("metadata", _same)
    make = TranscriptLine._make
    return [
        make(
            (
                row_id,
                role,
                None if content is None else text(content),
                None if tool_calls is None else calls(tool_calls),
                tool_call_id,
                None if metadata is None else meta(metadata),
            )
        )
        for row_id, role, content, tool_calls, tool_call_id, metadata in rows
    ]


@functools.cache
def _lines_query(dialect_name: str, tail: bool) -> Select[Any]:
    """The statement of :meth:`TranscriptLineReads.live_lines` (built once per shape);
    binds ``session_key``, ``session_id`` and, ``tail``, ``tail_limit`` (then newest
    first)."""
    by_name = {column.name: column for column in read_columns(live, dialect_name)}
    query = select(*(by_name[name] for name in LINE_COLUMNS)).where(
        live.c.session_key == bindparam("session_key"),
        live.c.session_id == bindparam("session_id"),
    )
    if not tail:
        return query.order_by(live.c.created_at.asc(), live.c.id.asc())
    return query.order_by(live.c.created_at.desc(), live.c.id.desc()).limit(
        bindparam("tail_limit", type_=BigInteger)
    )


class TranscriptLineReads:
    """The live transcript as :class:`TranscriptLine` rows."""

    conn: AsyncConnection

    async def live_lines(
        self, session_id: str, *, session_key: str, limit: int | None = None
    ) -> list[TranscriptLine]:
        """The live rows of ``session_id`` (stored under ``session_key``) as lines, oldest
        first; with ``limit``, the newest ``limit`` of them (a backward range scan of
        ``(session_id, created_at, id)``, reversed). One statement."""
        dialect = self.conn.dialect.name
        values: dict[str, Any] = {"session_key": session_key, "session_id": session_id}
        if limit is not None:
            values["tail_limit"] = limit
        result = await self.conn.execute(_lines_query(dialect, limit is not None), values)
        converters = dict(driver_converters(TranscriptEntry, LINE_COLUMNS, dialect))
        if not set(converters) <= set(_CONVERTED):  # a column type changed: convert it here
            raise AssertionError(f"unexpected converters: {sorted(converters)}")
        try:
            with gc_paused():
                lines: list[TranscriptLine] = _lines(result.cursor.fetchall(), converters)
        finally:
            result.close()
        if limit is not None:
            lines.reverse()
        return lines


__all__ = ["LINE_COLUMNS", "TranscriptLineReads"]
