"""Storing a summary the caller already has (``persist_compaction_result``): the positional
path of docs/semantics.md#persist, or against a captured source
(docs/semantics.md#compaction-source). Both commit through
:func:`.commit.rewrite_compacted_session`, which re-checks the transcript inside
its write transaction."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from ...compaction import entry_dict
from ...compaction.obligations import check_coverage, extract_obligations
from ...compaction.payload import build_payload
from ...db.uow import UnitOfWork
from ...errors import InvalidInputError
from ...keys import CanonicalKey
from ...models import (
    SessionNode,
    SessionSummary,
    TranscriptEntry,
    check_integer,
    check_optional_text,
)
from ...support.clock import now_ms
from .commit import rewrite_compacted_session
from .options import (
    MATCH_KEPT_MODES,
    SOURCE_ONLY_OPTIONS,
    PersistOptions,
    PersistSourceOptions,
    check_compaction_options,
    check_room_for_compaction,
    refuse_unknown,
)
from .record import summary_record
from .source import check_items, check_source_entries, live_rows, source_preimage

# The compactor's logger: users configure it by name.
log = logging.getLogger("opensquilla.session.compactor")


def _stored_summary(
    node: SessionNode,
    summary: str,
    removed: Sequence[TranscriptEntry],
    kept_count: int,
    options: PersistOptions,
    now: int,
) -> SessionSummary:
    """The summary row of a caller's summary: its obligations and coverage checked against
    the removed rows (never blocking), stored as ``structured_v1``."""
    obligations = extract_obligations(
        [entry_dict(entry) for entry in removed], [entry.id for entry in removed]
    )
    coverage = check_coverage(summary, obligations, blocking=False)
    return summary_record(
        node,
        options,
        removed,
        kept_count=kept_count,
        now=now,
        summary_text=summary,
        summary_payload=build_payload(summary, obligations, coverage),
        summary_format="structured_v1",
        coverage_status=coverage.status,
        missing_obligations=list(coverage.missing),
        critical_carry_forward=list(coverage.carry_forward),
    )


def _reuses_row(row: TranscriptEntry, wanted: TranscriptEntry, match_kept: str) -> bool:
    """Whether kept dict ``wanted`` (built as an entry) keeps the live ``row`` at its position
    as it is (docs/semantics.md#persist). ``"content"``: the same role and content, the
    contract's rule (SEMANTICS §9 step 5); ``"role"``: the same role (upstream HEAD: the dict
    is the compactor's replay view of the row). In both, a ``tool_call_id`` or ``tool_calls``
    the dict states must be the row's, so a tool result is never kept paired with a call the
    caller did not name."""
    if row.role != wanted.role:
        return False
    if match_kept == "content" and row.content != wanted.content:
        return False
    if wanted.tool_call_id is not None and wanted.tool_call_id != row.tool_call_id:
        return False
    return wanted.tool_calls is None or (wanted.tool_calls or None) == (row.tool_calls or None)


def check_persist_call(
    summary: object, kept_entries: object, options: PersistSourceOptions
) -> PersistSourceOptions:
    """The front door's checks of ``persist_compaction_result``: its options (an unknown
    name is a ``TypeError``, as for a keyword parameter), the summary, and either the kept
    dicts (positional path) or the captured source and its evidence; the options come
    back with ``match_kept`` resolved and ``source_entries`` a list."""
    refuse_unknown("persist_compaction_result", options, PersistSourceOptions)
    check_optional_text("summary", summary)
    source_entries = options.get("source_entries")
    if source_entries is not None:
        if options.get("match_kept") is not None:
            raise InvalidInputError(
                "match_kept is not accepted with source_entries (kept_entries is ignored there)"
            )
        entries = check_source_entries("source_entries", source_entries)
        check_optional_text("source_preimage", options.get("source_preimage"))
        boundary_message_id = options.get("source_boundary_message_id")
        check_optional_text("source_boundary_message_id", boundary_message_id, identifier=True)
        boundary_entry_id = options.get("source_boundary_entry_id")
        if boundary_entry_id is not None:
            check_integer("source_boundary_entry_id", boundary_entry_id, minimum=-(2**63))
        check_compaction_options(options)
        return {**options, "source_entries": entries}
    for name in SOURCE_ONLY_OPTIONS:
        if options.get(name) is not None:
            raise InvalidInputError(f"{name} is only accepted with source_entries")
    match_kept = options.get("match_kept")
    if match_kept is None:
        match_kept = "content"
    elif match_kept not in MATCH_KEPT_MODES:
        raise InvalidInputError(f"match_kept must be 'content' or 'role', not {match_kept!r}")
    for position, wanted in enumerate(
        check_items("kept_entries", kept_entries, Mapping, "dicts", "dict")
    ):
        check_optional_text(f"kept_entries[{position}].role", wanted.get("role"), identifier=True)
        check_optional_text(f"kept_entries[{position}].content", wanted.get("content"))
    check_compaction_options(options)
    return {**options, "match_kept": match_kept}


async def persist_compaction_result(
    uow: UnitOfWork,
    key: CanonicalKey,
    summary: str,
    kept_entries: Sequence[Mapping[str, Any]],
    options: PersistSourceOptions,
) -> bool:
    """Store a summary the caller already has (``options`` as :func:`check_persist_call`
    returned them); ``True`` when something was written.

    Two units of work, a read and the commit: between them the kept dicts are matched to
    the live rows and the summary's obligations checked, outside any transaction; the
    commit re-checks the rows it planned on (docs/semantics.md#persist)."""
    source_entries = options.get("source_entries")
    if source_entries is not None:
        return await _persist_against_source(uow, key, summary, list(source_entries), options)
    match_kept = options.get("match_kept") or "content"
    async with uow.snapshot() as tx:
        node, live = await live_rows(tx, key)
    if node is None:
        log.warning(
            "persist_compaction_result: session %s not found",
            key,
            extra={"session_key": key, "operation": "persist_compaction_result"},
        )
        return False
    removed_count = max(0, len(live) - len(kept_entries))
    removed, preserved = live[:removed_count], live[removed_count:]
    if not removed or not (summary or "").strip():
        # Nothing removed: there is nothing to summarise or archive. No summary: the
        # removed rows would be lost. Either way, no write.
        return False
    check_room_for_compaction(node)
    now = now_ms()
    record = _stored_summary(node, summary, removed, len(kept_entries), options, now)
    drop_ids: list[int] = []
    new_entries: list[TranscriptEntry] = []
    for position, wanted in enumerate(kept_entries):
        role = wanted.get("role") or "user"
        # Built (so checked) whether or not it is used.
        entry = TranscriptEntry(
            session_id=node.session_id,
            session_key=key,
            role=role,
            content=wanted.get("content") or "",
            tool_calls=wanted.get("tool_calls"),
            tool_call_id=wanted.get("tool_call_id"),
            turn_usage=wanted.get("turn_usage"),
            created_at=now,
        )
        if position < len(preserved):
            row = preserved[position]
            if _reuses_row(row, entry, match_kept):
                continue  # the live row is kept as it is, id and every column included
            drop_ids.append(row.id or 0)
        new_entries.append(entry)
    applied = await rewrite_compacted_session(
        uow,
        node,
        live,
        expected_prefix=live,
        archive_count=len(removed),
        summary=record,
        drop_ids=drop_ids,
        new_entries=new_entries,
        now=now,
    )
    if not applied:
        log.warning(
            "persist_compaction_result for %s not applied: the transcript changed since "
            "it was read",
            key,
            extra={"session_key": key, "operation": "persist_compaction_result"},
        )
    return applied


async def _persist_against_source(
    uow: UnitOfWork,
    key: CanonicalKey,
    summary: str,
    entries: list[TranscriptEntry],
    options: PersistSourceOptions,
) -> bool:
    """``persist_compaction_result`` with ``source_entries``: archive
    ``source[:removed_count]``, keep the rest of the source and every row appended after it
    live with their ids (``kept_entries`` is ignored). ``False``, nothing written, unless
    the source is non-empty, matches ``source_preimage`` and its boundary ids, and is still
    the live transcript's prefix at the commit. Two units of work: the session row, then
    the commit."""
    preimage = options.get("source_preimage")
    removed_count = options.get("removed_count")
    boundary_message_id = options.get("source_boundary_message_id")
    boundary_entry_id = options.get("source_boundary_entry_id")
    log_extra = {"session_key": key, "operation": "persist_compaction_result"}
    if (
        not entries
        or preimage is None
        or source_preimage(entries) != preimage
        or (boundary_message_id is not None and entries[-1].message_id != boundary_message_id)
        or (boundary_entry_id is not None and entries[-1].id != boundary_entry_id)
        or isinstance(removed_count, bool)
        or not isinstance(removed_count, int)
        or not 0 < removed_count <= len(entries)
        or not (summary or "").strip()
    ):
        log.warning(
            "persist_compaction_result for %s not applied: the source is empty, does not "
            "match its preimage or boundary, removes nothing, or the summary is blank",
            key,
            extra=log_extra,
        )
        return False
    async with uow.read() as tx:
        node = await tx.sessions.get(key)
    if node is None or any(
        entry.session_id != node.session_id or entry.id is None for entry in entries
    ):
        log.warning(
            "persist_compaction_result: the source is not of session %s's generation",
            key,
            extra=log_extra,
        )
        return False
    check_room_for_compaction(node)
    removed, preserved = entries[:removed_count], entries[removed_count:]
    now = now_ms()
    applied = await rewrite_compacted_session(
        uow,
        node,
        entries,
        expected_prefix=entries,
        archive_count=len(removed),
        summary=_stored_summary(node, summary, removed, len(preserved), options, now),
        now=now,
        allow_appended=True,
    )
    if not applied:
        log.warning(
            "persist_compaction_result for %s not applied: the captured source is no "
            "longer the live transcript's prefix",
            key,
            extra=log_extra,
        )
    return applied
