"""The lean transcript read (:meth:`SessionManager.get_transcript_lines`): each live row
reduced to what a framework integration reads back, and the latest summary of the same
snapshot (docs/reading.md#transcript-lines).

A :class:`TranscriptLine` is a plain named tuple, not a record: it is never written back,
and building one costs a fraction of a :class:`TranscriptEntry`, whose twenty fields a
reader that keeps its own objects in ``metadata`` never looks at.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from .records import SessionSummary


class TranscriptLine(NamedTuple):
    """One live row: its id, role, text, tool calls, tool call id and metadata, each the
    value the row's :class:`TranscriptEntry` holds in the field of that name (a
    ``metadata_only`` read leaves all but ``id`` and ``metadata`` ``None``)."""

    id: int
    role: str | None
    content: str | None
    tool_calls: list[dict[str, Any]] | None
    tool_call_id: str | None
    metadata: dict[str, Any] | None


@dataclass(frozen=True, slots=True)
class TranscriptLines:
    """The live rows of the current generation, oldest first, and (when asked for) its
    latest compaction summary, read from one snapshot: the summary is never newer or
    older than the rows beside it."""

    lines: list[TranscriptLine]
    summary: SessionSummary | None = None


__all__ = ["TranscriptLine", "TranscriptLines"]
