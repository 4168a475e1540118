"""``compact``, ``reset``, ``branch``, ``truncate``, ``prune``, ``cap``: the commands that
change one session or delete many. The deleting ones take ``--dry-run``, which reads the
same selection and reports it (:func:`.render.show_outcome`) without changing anything (nor
creating a missing database)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from ..compaction import CompactionConfig
from ..errors import InvalidInputError
from ..models import INT64_MAX
from ..models.reports import DeletionPreview, ResetReport
from .options import (
    DryRun,
    Json,
    LLMApiKeyEnv,
    LLMBaseUrl,
    LLMModel,
    LLMTimeout,
    SessionKey,
    parse_duration,
)
from .render import show_outcome
from .render.operations import (
    BRANCHED,
    COMPACTION,
    RESET,
    TRUNCATION,
    Branched,
    Compacted,
    deleted,
)
from .runtime import dsn, open_manager, run
from .summarizer import LLMOptions, choose_summarizer

_DAY_MS = 86_400_000


def compact(
    ctx: typer.Context,
    key: SessionKey,
    window: Annotated[
        int, typer.Option("--window", min=1, max=INT64_MAX, help="Context window in tokens.")
    ],
    strict: Annotated[
        bool, typer.Option("--strict", help="Refuse a summary that misses an obligation.")
    ] = False,
    as_json: Json = False,
    llm_base_url: LLMBaseUrl = None,
    llm_model: LLMModel = None,
    llm_api_key_env: LLMApiKeyEnv = None,
    llm_timeout: LLMTimeout = None,
) -> None:
    """Fold the oldest part of the live transcript into a summary (rows go to the archive).

    With an LLM base URL (--llm-base-url or $OPENSQUILLA_SESSION_LLM_BASE_URL) the summary
    comes from that OpenAI-compatible endpoint, chunk by chunk; a chunk whose request fails
    or times out gets the deterministic summary instead."""
    llm = LLMOptions(llm_base_url, llm_model, llm_api_key_env, llm_timeout)
    COMPACTION.show(run(lambda: _compact(dsn(ctx), key, window, strict, llm)), as_json)


def reset(
    ctx: typer.Context, key: SessionKey, dry_run: DryRun = False, as_json: Json = False
) -> None:
    """Start a new generation of KEY; the old one is archived to a file, then deleted."""
    show_outcome("reset", run(lambda: _reset(dsn(ctx), key, dry_run)), RESET, as_json)


def branch(
    ctx: typer.Context,
    parent: Annotated[str, typer.Argument(help="Parent session key.")],
    child: Annotated[str, typer.Argument(help="New session key.")],
    before: Annotated[
        str | None, typer.Option("--before", help="Copy only the messages before this id.")
    ] = None,
    no_transcript: Annotated[
        bool, typer.Option("--no-transcript", help="Start the child empty.")
    ] = False,
    as_json: Json = False,
) -> None:
    """Create CHILD from PARENT (by default with a copy of its transcript)."""
    BRANCHED.show(run(lambda: _branch(dsn(ctx), parent, child, before, no_transcript)), as_json)


def truncate(
    ctx: typer.Context,
    key: SessionKey,
    keep: Annotated[
        int, typer.Argument(min=0, max=INT64_MAX, help="Live messages to keep (the newest).")
    ],
    dry_run: DryRun = False,
    as_json: Json = False,
) -> None:
    """Keep the newest N live messages of KEY; older ones and the archive are deleted."""
    result = run(lambda: _truncate(dsn(ctx), key, keep, dry_run))
    show_outcome("truncate", result, TRUNCATION, as_json)


def prune(
    ctx: typer.Context,
    older_than: Annotated[
        str, typer.Option("--older-than", help="Age of the last update: 30d, 12h, 90m, 45s.")
    ],
    dry_run: DryRun = False,
    as_json: Json = False,
) -> None:
    """Delete sessions not updated for a while, with everything they hold."""

    async def work() -> DeletionPreview | int:
        max_age = _max_age(older_than)  # a bad age is reported before a bad --dsn
        return await _prune(dsn(ctx), max_age, dry_run)

    show_outcome("prune", run(work), deleted("prune"), as_json)


def cap(
    ctx: typer.Context,
    max_sessions: Annotated[
        int, typer.Option("--max", min=0, max=INT64_MAX, help="Sessions to keep.")
    ],
    dry_run: DryRun = False,
    as_json: Json = False,
) -> None:
    """Keep at most --max sessions, deleting the least recently updated."""
    result = run(lambda: _cap(dsn(ctx), max_sessions, dry_run))
    show_outcome("cap", result, deleted("cap"), as_json)


def _max_age(older_than: str) -> int:
    """``--older-than`` in milliseconds, refused past what the store can compare."""
    max_age = parse_duration(older_than)
    if max_age > INT64_MAX:
        raise InvalidInputError(
            f"--older-than {older_than.strip()} is out of range: at most "
            f"{INT64_MAX // _DAY_MS}d (the longest age, in milliseconds, the store can "
            "compare)"
        )
    return max_age


# -- calls into the library: one per command -------------------------------------------


async def _compact(dsn: str, key: str, window: int, strict: bool, llm: LLMOptions) -> Compacted:
    chosen = choose_summarizer(llm)  # bad LLM settings are refused before the database opens
    async with open_manager(dsn) as manager:
        config = CompactionConfig(coverage_blocking=strict)
        result = await manager.compact_with_result(
            key, window, config, trigger_reason="operator", summarizer=chosen.summarizer
        )
        return Compacted(result, chosen.description)


async def _reset(dsn: str, key: str, dry_run: bool) -> DeletionPreview | ResetReport:
    async with open_manager(dsn, create=not dry_run) as manager:
        if dry_run:
            return await manager.preview_reset(key)
        return await manager.reset_with_report(key)


async def _branch(
    dsn: str, parent: str, child: str, before: str | None, no_transcript: bool
) -> Branched:
    async with open_manager(dsn) as manager:
        node = await manager.branch(
            parent, child, fork_transcript=not no_transcript, fork_before_message_id=before
        )
        return Branched(node, len(await manager.get_transcript(node.session_key)))


async def _truncate(
    dsn: str, key: str, keep: int, dry_run: bool
) -> DeletionPreview | dict[str, Any]:
    async with open_manager(dsn, create=not dry_run) as manager:
        if dry_run:
            return await manager.preview_truncate(key, keep)
        return await manager.truncate(key, keep)


async def _prune(dsn: str, max_age: int, dry_run: bool) -> DeletionPreview | int:
    async with open_manager(dsn, create=not dry_run) as manager:
        if dry_run:
            return await manager.preview_prune_stale(max_age)
        return await manager.prune_stale(max_age)


async def _cap(dsn: str, max_sessions: int, dry_run: bool) -> DeletionPreview | int:
    async with open_manager(dsn, create=not dry_run) as manager:
        if dry_run:
            return await manager.preview_cap_entries(max_sessions)
        return await manager.cap_entries(max_sessions)
