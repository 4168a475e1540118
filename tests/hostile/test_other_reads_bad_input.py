"""Bad arguments to the reads of HEAD-FEATURES §2 (keyset listing, newest messages, one
message by id, the transcript as JSON, batch reads): each is the package's own
``InvalidInputError`` naming the argument, before any statement, on both backends."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from opensquilla.session import SessionManager, SessionStorage
from opensquilla.session.errors import InvalidInputError
from opensquilla.session.models import SessionListCursor

from .test_bad_input_errors import BEYOND_64_BITS, refused

KEY = "agent:main:bad-reads"

Calls = list[tuple[str, Callable[[], Awaitable[Any]]]]


async def test_keyset_listing_refuses_arguments_of_the_wrong_type(
    manager: SessionManager, storage: SessionStorage
) -> None:
    await manager.create(KEY)
    calls: Calls = [
        ("limit", lambda: manager.list_sessions_page(limit="10")),  # type: ignore[arg-type]
        ("limit", lambda: manager.list_sessions_page(limit=1.5)),  # type: ignore[arg-type]
        ("limit", lambda: manager.list_sessions_page(limit=True)),
        ("limit", lambda: storage.list_sessions_page(limit=BEYOND_64_BITS)),
        ("limit", lambda: storage.list_sessions_page(limit=-(2**64))),
        ("cursor", lambda: manager.list_sessions_page(cursor="1:agent:main:x")),  # type: ignore[arg-type]
        ("cursor", lambda: storage.list_sessions_page(limit=1, cursor=(1, 1, KEY))),  # type: ignore[arg-type]
        ("agent_id", lambda: manager.list_sessions_page(agent_id=5)),  # type: ignore[arg-type]
        ("status", lambda: manager.list_sessions_page(status=["done"])),  # type: ignore[arg-type]
        ("key_prefix", lambda: manager.list_sessions_page(key_prefix=5)),  # type: ignore[arg-type]
        ("key_prefix", lambda: manager.list_sessions_page(key_prefix=b"agent:")),  # type: ignore[arg-type]
        ("key_prefix", lambda: manager.list_sessions_page(key_prefix="agent:\x00")),
        ("key_prefix", lambda: storage.list_sessions_page(limit=1, key_prefix="a\ud800")),
        ("key_prefix", lambda: manager.list_sessions(key_prefix=["agent:"])),  # type: ignore[arg-type]
        ("key_prefix", lambda: storage.list_sessions(key_prefix="x" * 513)),
        ("key_prefix", lambda: storage.list_sessions(key_prefix="agent:\x00:")),
    ]
    for name, call in calls:
        await refused(storage, call, names=name)


@pytest.mark.parametrize(
    ("fields", "name"),
    [
        (("1", 1, KEY), "cursor.activity_at"),
        ((1, 2**63, KEY), "cursor.updated_at"),
        ((1, None, KEY), "cursor.updated_at"),
        ((1, 1, 5), "cursor.session_key"),
        ((1, 1, "k\x00"), "cursor.session_key"),
    ],
)
def test_a_cursor_out_of_its_domain_is_refused(fields: tuple[Any, ...], name: str) -> None:
    with pytest.raises(InvalidInputError, match=re.escape(name)):
        SessionListCursor(*fields)


async def test_transcript_reads_refuse_arguments_of_the_wrong_type(
    manager: SessionManager, storage: SessionStorage
) -> None:
    node = await manager.create(KEY)
    await manager.append_message(KEY, "user", "hello")
    sid = node.session_id
    calls: Calls = [
        ("n", lambda: manager.get_recent_transcript(KEY, "3")),  # type: ignore[arg-type]
        ("n", lambda: manager.get_recent_transcript(KEY, 1.0)),  # type: ignore[arg-type]
        ("n", lambda: manager.get_recent_transcript(KEY, True)),
        ("n", lambda: manager.get_recent_transcript(KEY, -1)),
        ("limit", lambda: manager.get_transcript_lines(KEY, "3")),  # type: ignore[arg-type]
        ("limit", lambda: manager.get_transcript_lines(KEY, -1)),
        ("summary", lambda: manager.get_transcript_lines(KEY, summary=1)),  # type: ignore[arg-type]
        (
            "metadata_only",
            lambda: manager.get_transcript_lines(KEY, metadata_only=None),  # type: ignore[arg-type]
        ),
        ("n", lambda: storage.get_recent_transcript(sid, BEYOND_64_BITS)),
        ("session_id", lambda: storage.get_recent_transcript(5, 1)),  # type: ignore[arg-type]
        ("session_id", lambda: storage.get_recent_transcript("s\x00", 1)),
        ("message_id", lambda: manager.get_canonical_transcript_entry(KEY, 5)),  # type: ignore[arg-type]
        ("message_id", lambda: manager.get_canonical_transcript_entry(KEY, "m\x00")),
        ("message_id", lambda: storage.get_canonical_transcript_entry(sid, None)),  # type: ignore[arg-type]
        ("session_id", lambda: storage.get_canonical_transcript_entry(b"s", "m")),  # type: ignore[arg-type]
        ("limit", lambda: manager.read_transcript(KEY, "5")),  # type: ignore[arg-type]
        ("limit", lambda: manager.read_transcript(KEY, -1)),
    ]
    for name, call in calls:
        await refused(storage, call, names=name)


async def test_batch_reads_refuse_arguments_of_the_wrong_type(
    manager: SessionManager, storage: SessionStorage
) -> None:
    """A single string is refused, not read as a list of one-character ids."""
    await manager.create(KEY)
    calls: Calls = [
        ("session_keys", lambda: manager.count_transcript_entries_batch(KEY)),  # type: ignore[arg-type]
        ("session_keys[1]", lambda: manager.count_transcript_entries_batch([KEY, 5])),  # type: ignore[list-item]
        ("session_keys[0]", lambda: manager.count_transcript_entries_batch(["k\x00"])),
        ("session_ids", lambda: storage.count_transcript_entries_batch({"a"})),  # type: ignore[arg-type]
        ("session_ids[0]", lambda: storage.count_transcript_entries_batch([None])),  # type: ignore[list-item]
        ("session_keys", lambda: manager.list_user_transcript_content_batch(None)),  # type: ignore[arg-type]
        (
            "limit_per_session",
            lambda: manager.list_user_transcript_content_batch([KEY], limit_per_session=-1),
        ),
        (
            "limit_per_session",
            lambda: storage.list_user_transcript_content_batch([KEY], limit_per_session="3"),  # type: ignore[arg-type]
        ),
        ("session_ids", lambda: storage.list_user_transcript_content_batch("abc")),  # type: ignore[arg-type]
        ("session_ids[0]", lambda: storage.list_user_transcript_content_batch([b"id"])),  # type: ignore[list-item]
    ]
    for name, call in calls:
        await refused(storage, call, names=name)
