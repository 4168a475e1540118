"""Pages of the canonical transcript and the generation's completeness (docs/semantics.md#pages).

A page is a window of the canonical transcript (compacted archive plus live rows, in
``(created_at, id)`` order, an archived row shown with the id it had when live) together
with whether older or newer rows remain. Its cursors are ``(created_at, id)`` pairs of
rows of the page's generation. Coverage says whether that canonical transcript is known
to hold everything the generation ever said: every compaction left its summary and
exactly the archived rows the summary counts, and a forked generation was written by fork
logic that records this evidence (``schema_version >= CANONICAL_FORK_PROOF_SCHEMA_VERSION``).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import InvalidInputError
from .checks import INT64_MAX, INT64_MIN, check_integer, describe
from .messages import TranscriptEntry

CANONICAL_FORK_PROOF_SCHEMA_VERSION = 2
"""The ``sessions.schema_version`` from which a forked row's compaction count is evidence:
rows written by branch and reset since canonical pages exist carry at least this. A forked
row below it (a legacy fork) is never reported complete."""

Cursor = tuple[int, int]
"""A position in the canonical transcript: ``(created_at, id)`` of one of its rows."""


@dataclass(frozen=True, slots=True)
class CanonicalTranscriptCoverage:
    """Whether a generation's canonical transcript is complete, and the evidence counted.

    ``compaction_count`` is the session row's count (never below 0); ``inherited_compactions``
    is its ``forked_from_parent`` flag (the count then includes compactions the parent made
    before the fork). An unknown generation is ``(False, 0, False)``."""

    canonical_complete: bool
    compaction_count: int
    inherited_compactions: bool


@dataclass(frozen=True, slots=True)
class CanonicalTranscriptPage:
    """One page of a session's canonical transcript, oldest first.

    ``has_more``: older rows exist before the page (a newest-first or ``before`` page) or
    newer rows after it (an ``after`` page). ``canonical_complete`` is the generation's
    coverage as read right after the page (a later, separate read)."""

    entries: list[TranscriptEntry]
    has_more: bool
    canonical_complete: bool


def check_page_size(name: str, value: object) -> int:
    """A page size: an ``int`` (not a ``bool``); below 1 it counts as 1, as upstream's
    ``max(1, int(limit))`` does. Anything but an ``int`` is refused."""
    return max(1, check_integer(name, value, minimum=INT64_MIN, maximum=INT64_MAX - 1))


def check_cursor(name: str, value: object) -> Cursor | None:
    """``None`` or a ``(created_at, id)`` tuple of two ``int`` (64-bit, not ``bool``)."""
    if value is None:
        return None
    if not isinstance(value, tuple) or len(value) != 2:
        raise InvalidInputError(
            f"{name} must be None or a (created_at, id) tuple of two integers, not "
            f"{describe(value)}"
        )
    created_at, row_id = value
    return (
        check_integer(f"{name}[0]", created_at, minimum=INT64_MIN),
        check_integer(f"{name}[1]", row_id, minimum=INT64_MIN),
    )


__all__ = [
    "CANONICAL_FORK_PROOF_SCHEMA_VERSION",
    "CanonicalTranscriptCoverage",
    "CanonicalTranscriptPage",
    "Cursor",
    "check_cursor",
    "check_page_size",
]
