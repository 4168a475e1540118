"""The active compaction context of a generation (docs/semantics.md#rolling-checkpoints).

:func:`build_compaction_context_records` projects a generation's summaries and context
states onto the texts a request replays: one record per checkpoint still in force. It is
pure (records in, records out); :func:`read_context_records` reads its inputs. A rolling
compaction folds these texts into its summary, and its commit re-checks their
:func:`context_fingerprint` inside the write transaction.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import ValidationError

from ...compaction.coverage import render_structured_summary
from ...compaction.payload import StructuredSummaryV1
from ...compaction.summary_replay import STRUCTURED_HEADER
from ...db.uow import Transaction
from ...models import SessionContextState, SessionSummary
from ...support import clock

PORTABLE_STATE_KIND = "structured_summary_v1"


@dataclass(frozen=True)
class CompactionContextRecord:
    """One checkpoint in force: its replay ``text``, where it came from (``context_state``,
    the rendered portable state; ``summary``, a summary's text with no such state), its
    ``compaction_id`` when known and the last live row id it covers."""

    text: str
    source: Literal["context_state", "summary"]
    compaction_id: str | None
    covered_through_id: int


def _usable(state: SessionContextState, now: int) -> bool:
    return (
        state.valid
        and (state.expires_at is None or state.expires_at > now)
        and state.provider == "portable"
        and state.state_kind == PORTABLE_STATE_KIND
        and state.portable
        and isinstance(state.payload, dict)
    )


def _rendered(state: SessionContextState) -> str | None:
    """The state's payload as replay text, or ``None`` when it does not validate or renders
    nothing."""
    try:
        structured = StructuredSummaryV1.model_validate(state.payload)
    except ValidationError:
        return None
    text = render_structured_summary(structured.model_dump())
    return None if text == STRUCTURED_HEADER else text


def replaces_prior_context(state: SessionContextState) -> bool:
    """Whether the state says its checkpoint replaces every earlier one."""
    coverage = state.payload.get("source_coverage")
    return isinstance(coverage, dict) and coverage.get("replaces_prior_context") is True


def _compaction_id(state: SessionContextState) -> str | None:
    value = state.payload.get("compaction_id")
    return value.strip() or None if isinstance(value, str) else None


def build_compaction_context_records(
    *,
    context_states: Iterable[SessionContextState],
    summaries: Iterable[SessionSummary],
    now_ms: int | None = None,
) -> list[CompactionContextRecord]:
    """The checkpoints in force among one generation's ``context_states`` and
    ``summaries``, ordered by ``covered_through_id`` (a state before a summary at equal):

    * a state counts when it is valid, unexpired at ``now_ms`` (default: now), portable,
      of kind ``structured_summary_v1`` with a dict payload that validates and renders at
      least one section; of several covering the same id, the newest (``created_at``, then
      ``id``);
    * the newest counting state flagged ``replaces_prior_context`` drops every other state
      and every summary covering no further than it does;
    * a summary whose ``covered_through_id`` no counting state covers stands as its
      ``summary_text`` (when not blank). A state that does not count suppresses nothing.
    """
    now = clock.now_ms() if now_ms is None else now_ms
    newest: dict[int, SessionContextState] = {}
    ordered = sorted(context_states, key=lambda state: (state.created_at, state.id or 0))
    for state in ordered:
        if _usable(state, now):
            newest[state.covered_through_id] = state
    counted: list[tuple[SessionContextState, str]] = []
    for state in newest.values():
        text = _rendered(state)
        if text is not None:
            counted.append((state, text))
    floor: int | None = None
    flagged = [pair for pair in counted if replaces_prior_context(pair[0])]
    if flagged:
        replacement = max(flagged, key=lambda pair: (pair[0].created_at, pair[0].id or 0))[0]
        floor = replacement.covered_through_id
        counted = [
            pair for pair in counted if pair[0] is replacement or pair[0].covered_through_id > floor
        ]
    records = [
        CompactionContextRecord(
            text, "context_state", _compaction_id(state), state.covered_through_id
        )
        for state, text in counted
    ]
    covered = {record.covered_through_id for record in records}
    for summary in summaries:
        text = summary.summary_text.strip()
        if not text or summary.covered_through_id in covered:
            continue
        if floor is not None and summary.covered_through_id <= floor:
            continue
        records.append(
            CompactionContextRecord(
                text, "summary", summary.compaction_id, summary.covered_through_id
            )
        )
    # Stable: at an equal covered id a state record stays before a summary record.
    return sorted(records, key=lambda record: record.covered_through_id)


def context_fingerprint(records: Sequence[CompactionContextRecord]) -> str:
    """The SHA-256 (hex) of the projection: equal exactly when the records are."""
    document = [
        [record.text, record.source, record.compaction_id, record.covered_through_id]
        for record in records
    ]
    encoded = json.dumps(document, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(encoded.encode("utf-8", "surrogatepass")).hexdigest()


async def read_context_records(
    tx: Transaction, session_key: str, session_id: str, now: int
) -> list[CompactionContextRecord]:
    """The records in force for generation ``session_id`` of ``session_key``, read on
    ``tx`` (states are stored per key, every generation: only this one's count)."""
    summaries = await tx.summaries.list_for_session(session_id, session_key=session_key)
    states = await tx.states.list_for_key(
        session_key, state_kind=PORTABLE_STATE_KIND, session_id=session_id
    )
    return build_compaction_context_records(context_states=states, summaries=summaries, now_ms=now)


@dataclass(frozen=True)
class RollingContext:
    """The checkpoints a rolling compaction read: the text it folds in (``None``: none),
    the fingerprint its commit re-checks, the last row they cover."""

    previous_summary: str | None
    fingerprint: str
    covered_through_id: int

    @classmethod
    def of(cls, records: Sequence[CompactionContextRecord]) -> RollingContext:
        return cls(
            previous_summary="\n\n".join(record.text for record in records) or None,
            fingerprint=context_fingerprint(records),
            covered_through_id=max((record.covered_through_id for record in records), default=0),
        )


__all__ = [
    "PORTABLE_STATE_KIND",
    "CompactionContextRecord",
    "RollingContext",
    "build_compaction_context_records",
    "context_fingerprint",
    "read_context_records",
    "replaces_prior_context",
]
