"""Coverage, backfill and the structured payload of one compaction
(docs/semantics.md#verified-backfill).

By default (the contract's behaviour) the summary text is checked against the obligations of
the removed entries; what it misses is carried forward in the payload
(``pass_with_backfill``) or, under ``coverage_blocking``, blocks the rewrite.

Under ``CompactionConfig.verified_backfill`` (upstream's strict-coverage backfill,
HEAD-FEATURES §5.9) the obligations are selected by kind priority and recency, the payload
carries the commands run and the pending tool-call ids, and the summary becomes the payload
rendered as a structured summary (``[Structured Compaction Summary]`` and its sections,
:mod:`.summary_replay`). The prose is checked first and what it misses is carried forward;
under ``coverage_blocking`` coverage is then checked again on that rendering as a request
replays it, and only a fact still absent blocks.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from . import obligations as ob
from .payload import build_payload, source_coverage
from .summary_replay import STRUCTURED_HEADER, format_compaction_summary_context
from .tools import unanswered_calls

#: Selection order under verified backfill (after the reserved obligations), most important
#: first; within a kind the newest come first.
KIND_PRIORITY = (
    ob.USER_GOAL,
    ob.USER_CONSTRAINT,
    ob.NEXT_ACTION,
    ob.FAILURE,
    ob.DO_NOT_REPEAT,
    ob.DECISION,
    ob.QUESTION,
    ob.TOOL_RESULT_ID,
    ob.FILE_PATH,
    ob.ARTIFACT,
    ob.COMMAND,
    ob.TOOL_RESULT_FACT,
    ob.IDENTIFIER,
)
_RANK = {kind: rank for rank, kind in enumerate(KIND_PRIORITY)}

#: ``(section title, payload key)`` in the order a structured summary renders them.
_SECTIONS = (
    ("Goal", "user_goal"),
    ("Current Status", "current_status"),
    ("Next Action", "next_action"),
    ("Completed Steps", "completed_steps"),
    ("Open Steps", "open_steps"),
    ("Files and Artifacts", "files_and_artifacts"),
    ("Tool Results To Remember", "tool_results_to_remember"),
    ("Decisions and Rationale", "decisions_and_rationale"),
    ("Known Failures", "known_failures"),
    ("Executed Commands and Tests", "executed_commands_and_tests"),
    ("Pending Tool and Approval IDs", "pending_tool_and_approval_ids"),
    ("Important Identifiers", "important_identifiers"),
    ("Constraints and Preferences", "constraints_and_preferences"),
    ("Do Not Repeat", "do_not_repeat"),
    ("Unresolved Questions", "unresolved_questions"),
    ("Critical Carry Forward", "critical_carry_forward"),
)


def pending_call_ids(
    removed: Sequence[Mapping[str, Any]], entries: Sequence[Mapping[str, Any]]
) -> list[str]:
    """Ids of the calls made in ``removed`` that no entry of ``entries`` (the whole
    transcript handed to the compactor) answers, in order."""
    still_open = unanswered_calls(entries)
    return [call_id for call_id in unanswered_calls(removed) if call_id in still_open]


def select_obligations(
    found: Sequence[ob.Obligation],
    pending: Sequence[str],
    *,
    limit: int = ob.MAX_OBLIGATIONS,
) -> list[ob.Obligation]:
    """At most ``limit`` of ``found`` (in source order), in source order: the newest goal,
    the newest constraint and the id of every pending call first, then the rest by
    :data:`KIND_PRIORITY`, newest first within a kind."""
    pending_set = set(pending)
    reserved: list[int] = []
    for kind in (ob.USER_GOAL, ob.USER_CONSTRAINT):
        newest = [i for i, item in enumerate(found) if item.kind == kind]
        reserved += newest[-1:]
    reserved += [
        i
        for i, item in enumerate(found)
        if item.kind == ob.TOOL_RESULT_ID and item.value in pending_set
    ]
    chosen = set(reserved[:limit])
    ranked = sorted(
        (i for i in range(len(found)) if i not in chosen),
        key=lambda i: (_RANK[found[i].kind], -i),
    )
    chosen.update(ranked[: max(limit - len(chosen), 0)])
    return [found[i] for i in sorted(chosen)]


def removed_obligations(
    removed: Sequence[Mapping[str, Any]],
    ids: Sequence[int | None] | None,
    entries: Sequence[Mapping[str, Any]],
    *,
    verified: bool,
) -> tuple[list[ob.Obligation], list[str]]:
    """``(obligations, pending call ids)`` of the ``removed`` part of ``entries``: the
    contract's capped extraction (no pending ids), or, ``verified``, every obligation then
    :func:`select_obligations` of them."""
    if not verified:
        return ob.extract_obligations(removed, ids), []
    pending = pending_call_ids(removed, entries)
    found = ob.extract_obligations(removed, ids, max_obligations=sys.maxsize)
    return select_obligations(found, pending), pending


def _lines(value: Any) -> list[str]:
    if isinstance(value, Mapping):
        return ["; ".join(f"{key}: {item}" for key, item in value.items())]
    if isinstance(value, list):
        return [line for item in value for line in _lines(item)]
    text = "" if value is None else str(value).strip()
    return [text] if text else []


def render_structured_summary(payload: Mapping[str, Any]) -> str:
    """``payload`` as a structured summary: the header, then one ``Title:`` section per
    non-empty field, after a blank line (lists as ``- item`` lines)."""
    parts = [STRUCTURED_HEADER]
    for title, key in _SECTIONS:
        value = payload.get(key)
        lines = _lines(value)
        if not lines:
            continue
        body = lines if isinstance(value, str) else [f"- {line}" for line in lines]
        parts.append(f"{title}:\n" + "\n".join(body))
    return "\n\n".join(parts)


@dataclass(frozen=True)
class CoveredSummary:
    """The summary text to store, its structured payload and its coverage."""

    summary: str
    payload: dict[str, Any]
    coverage: ob.Coverage


def cover_summary(
    summary: str,
    obligations: Sequence[ob.Obligation],
    *,
    blocking: bool,
    verified: bool,
    pending: Sequence[str] = (),
) -> CoveredSummary:
    """Check ``summary`` against ``obligations`` and build the payload (see the module
    docstring); ``pending`` are the pending call ids (verified backfill only)."""
    if not verified:
        coverage = ob.check_coverage(summary, obligations, blocking=blocking)
        return CoveredSummary(summary, build_payload(summary, obligations, coverage), coverage)
    prose = ob.check_coverage(summary, obligations, blocking=False)
    payload = build_payload(summary, obligations, prose, verified=True, pending=pending)
    rendered = render_structured_summary(payload)
    coverage = prose
    if blocking:
        replay = format_compaction_summary_context([rendered]) or ""
        coverage = ob.check_coverage(replay, obligations, blocking=True)
        payload["source_coverage"] = source_coverage(coverage).model_dump()
    return CoveredSummary(rendered, payload, coverage)
