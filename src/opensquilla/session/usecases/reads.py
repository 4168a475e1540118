"""Transcript reads by session key that upstream added after the contract revision: the
newest messages, one message by id, the transcript as JSON, and batch reads over many
keys (docs/semantics.md#other-reads).

Each resolves the key to its current generation first, then reads that generation's rows;
a missing key is ``SessionNotFoundError`` (a ``KeyError``), except in the batch reads,
where it has no rows.
"""

from __future__ import annotations

from typing import Any

from ..keys import canonicalize_session_key
from ..models import (
    TranscriptEntry,
    check_integer,
    check_optional_integer,
    check_text,
    check_text_list,
)
from ..storage import SessionStorage
from .generations import GenerationCache


async def recent_transcript(
    storage: SessionStorage, generations: GenerationCache, session_key: str, n: int
) -> list[TranscriptEntry]:
    """The newest ``n`` live rows of the current generation, oldest first."""
    check_integer("n", n)
    node = await generations.require(session_key)
    return await storage.get_recent_transcript(node.session_id, n)


async def canonical_entry(
    storage: SessionStorage, generations: GenerationCache, session_key: str, message_id: str
) -> TranscriptEntry | None:
    """The newest canonical row (archive or live) of the current generation carrying
    ``message_id``, or ``None``."""
    check_text("message_id", message_id, identifier=True)
    node = await generations.require(session_key)
    return await storage.get_canonical_transcript_entry(node.session_id, message_id)


async def read_transcript(
    storage: SessionStorage, generations: GenerationCache, session_key: str, limit: int | None
) -> list[dict[str, Any]]:
    """The live transcript of the current generation as JSON-ready dicts
    (``model_dump(mode="json")`` of each entry), the first ``limit`` rows when given."""
    check_optional_integer("limit", limit)
    node = await generations.require(session_key)
    entries = await storage.get_transcript(node.session_id, limit)
    return [entry.model_dump(mode="json") for entry in entries]


async def count_by_key(storage: SessionStorage, session_keys: list[str]) -> dict[str, int]:
    """Live rows of each key's current generation, keyed by the keys as given (0 for a
    missing key); ``{}`` for no keys."""
    keys, session_ids = await _current_generations(storage, session_keys)
    counts = await storage.count_transcript_entries_batch(sorted(set(session_ids.values())))
    return {key: counts[session_ids[key]] if key in session_ids else 0 for key in keys}


async def user_content_by_key(
    storage: SessionStorage, session_keys: list[str], *, limit_per_session: int
) -> dict[str, list[str]]:
    """The first ``limit_per_session`` non-empty live ``user`` contents of each key's
    current generation, keyed by the keys as given (``[]`` for a missing key)."""
    check_integer("limit_per_session", limit_per_session)
    keys, session_ids = await _current_generations(storage, session_keys)
    contents = await storage.list_user_transcript_content_batch(
        sorted(set(session_ids.values())), limit_per_session=limit_per_session
    )
    return {key: list(contents[session_ids[key]]) if key in session_ids else [] for key in keys}


async def _current_generations(
    storage: SessionStorage, session_keys: list[str]
) -> tuple[list[str], dict[str, str]]:
    """The keys as given, and ``{given key: current session id}`` of those that exist
    (any spelling of a key reaches its session), read in one snapshot."""
    keys = check_text_list("session_keys", session_keys, identifier=True)
    canonical = {key: canonicalize_session_key(key) for key in keys}
    async with storage.uow.snapshot() as tx:
        session_ids = await tx.sessions.current_session_ids(sorted(set(canonical.values())))
    return keys, {key: session_ids[form] for key, form in canonical.items() if form in session_ids}
