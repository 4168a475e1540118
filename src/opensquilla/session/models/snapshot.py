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
