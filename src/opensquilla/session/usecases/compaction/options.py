"""What the compaction calls accept and check before they read or write anything: the
keyword options (declared once for the manager and the use cases), their checks, and the
caller's lock (docs/semantics.md#compaction, #persist, #repair)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, TypedDict

from ...compaction import CompactionConfig, Summarizer, normalize_instructions
from ...errors import InvalidInputError
from ...models import (
    COMPACTION_ID_MAX_LENGTH,
    INT32_MAX,
    SessionNode,
    TranscriptEntry,
    check_optional_text,
)

MutationContext = Callable[[], AbstractAsyncContextManager[Any]]
DEGRADED = "degraded_forensic"


def flush_status(value: str | None) -> str:
    """The stored flush-receipt status (docs/semantics.md#repair)."""
    if not value:
        return "unknown"
    return DEGRADED if value == "unsafe" else value


def check_compaction_options(options: PersistOptions) -> None:
    """The options both compaction paths store (:class:`PersistOptions`): refused before
    anything is read.

    ``compaction_id`` is stored in the compacted archive too, where it is plain indexed
    text: an identifier (no NUL) of bounded length.
    """
    check_optional_text(
        "compaction_id",
        options.get("compaction_id"),
        identifier=True,
        max_length=COMPACTION_ID_MAX_LENGTH,
    )
    check_optional_text("trigger_reason", options.get("trigger_reason"))
    check_optional_text("flush_receipt_status", options.get("flush_receipt_status"))


def check_room_for_compaction(node: SessionNode) -> None:
    """``compaction_count`` is a 32-bit column: a compaction that would take it past that is
    refused (SQLite would store the larger number, Postgres refuse it)."""
    if node.compaction_count >= INT32_MAX:
        raise InvalidInputError(
            f"compaction_count of {node.session_key} is at {node.compaction_count}, the largest "
            "value it can hold; nothing was written"
        )


@contextlib.asynccontextmanager
async def entered(context: MutationContext | None) -> AsyncIterator[None]:
    if context is None:
        yield
        return
    async with context():
        yield


class PersistOptions(TypedDict, total=False):
    """What a stored summary records about its compaction (keyword options, declared once
    for the manager and this use case)."""

    compaction_id: str | None
    trigger_reason: str | None
    flush_receipt_status: str | None


class PersistSourceOptions(PersistOptions, total=False):
    """``persist_compaction_result``'s options: the record options and a captured source
    (docs/semantics.md#compaction-source)."""

    removed_count: int | None
    # Positional path only (docs/semantics.md#persist): which kept dicts reuse the live row
    # at their position. "content" (the default, SEMANTICS §9): same role and content;
    # "role" (upstream HEAD, opt-in): same role. Either way a tool_call_id or tool_calls the
    # dict states must be the row's.
    match_kept: str | None
    source_entries: Sequence[TranscriptEntry] | None
    source_preimage: str | None
    source_boundary_message_id: str | None
    source_boundary_entry_id: int | None


MATCH_KEPT_MODES = ("content", "role")

SOURCE_ONLY_OPTIONS = (
    "removed_count",
    "source_preimage",
    "source_boundary_message_id",
    "source_boundary_entry_id",
)


class CompactionOptions(PersistOptions, total=False):
    """The keyword options of a compaction: the record options, the caller's lock around
    the read and the commit, a summariser for this run, and the message id from which on
    every row stays live (docs/semantics.md#protected-boundary)."""

    mutation_context: MutationContext | None
    summarizer: Summarizer | None
    protected_boundary_message_id: str | None


def refuse_unknown(call: str, options: Mapping[str, object], kind: Any) -> None:
    """``**options`` accepts any name at run time: refuse one the options do not declare,
    as a plain keyword parameter would."""
    for name in options:
        if name not in kind.__optional_keys__:
            raise TypeError(f"{call}() got an unexpected keyword argument {name!r}")


def check_compaction_call(
    context_window_tokens: object,
    config: object,
    custom_instructions: object,
    options: CompactionOptions,
) -> CompactionConfig:
    """The front door's checks of a compaction, before anything is read: its options (an
    unknown name is a ``TypeError``, as for a keyword parameter), the window, the config
    (``None``: the defaults; a ``CompactionConfig`` was checked when built and is trusted
    from here on), the instructions and each option's value. Returns the config to use."""
    refuse_unknown("compact_with_result", options, CompactionOptions)
    if config is None:
        config = CompactionConfig()
    elif not isinstance(config, CompactionConfig):
        raise InvalidInputError(
            f"config must be a CompactionConfig or None, not {type(config).__name__}"
        )
    if isinstance(context_window_tokens, bool) or not isinstance(context_window_tokens, int):
        raise InvalidInputError(
            f"context_window_tokens must be an integer, not {type(context_window_tokens).__name__}"
        )
    check_optional_text("custom_instructions", custom_instructions)
    try:
        normalize_instructions(custom_instructions)  # type: ignore[arg-type]
    except ValueError as exc:
        raise InvalidInputError(str(exc)) from exc
    check_compaction_options(options)
    boundary = options.get("protected_boundary_message_id")
    check_optional_text("protected_boundary_message_id", boundary, identifier=True)
    mutation_context = options.get("mutation_context")
    if mutation_context is not None and not callable(mutation_context):
        raise InvalidInputError("mutation_context must be a callable returning a context manager")
    summarizer = options.get("summarizer")
    if summarizer is not None and not callable(getattr(summarizer, "summarize", None)):
        raise InvalidInputError("summarizer must have an async summarize() method")
    return config
