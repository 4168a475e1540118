"""What a reset archives: one generation of a session, read inside the reset transaction
(docs/semantics.md#reset-archive)."""

from __future__ import annotations

from pydantic import BaseModel

from .messages import TranscriptEntry
from .records import SessionNode, SessionSummary


class GenerationSnapshot(BaseModel):
    """One session generation as it stood inside a reset transaction, for its archive.

    ``session`` already carries the bumped epoch but still the old ``session_id``;
    ``transcript`` is the canonical transcript (compacted archive and live rows).
    """

    session: SessionNode
    transcript: list[TranscriptEntry]
    summaries: list[SessionSummary]


class CompactionSourceSnapshot(BaseModel, frozen=True):
    """The live rows an inline compaction was planned on (docs/semantics.md#compaction-source).

    ``entries`` oldest first; ``preimage`` the SHA-256 of their stable form
    (:func:`opensquilla.session.usecases.compaction.source.source_preimage`);
    ``boundary_message_id`` and ``boundary_entry_id`` those of the last entry (``None`` when
    empty). An empty snapshot (an unknown boundary) makes any later install fail.
    """

    entries: tuple[TranscriptEntry, ...]
    preimage: str
    boundary_message_id: str | None = None
    boundary_entry_id: int | None = None
