"""Keyset pages of the session listing (docs/semantics.md#listing).

A page is read strictly after a cursor, the position of the last session of the page
before, so a walk over the whole listing neither repeats nor skips a session when rows are
inserted or deleted meanwhile (an offset shifts). The listing order is ``updated_at``
then ``session_key``, both descending.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TypedDict

from ..errors import InvalidInputError
from .checks import check_millis, check_text
from .records import SessionNode

CURSOR_SEPARATOR = ":"
_MILLIS = re.compile(r"-?[0-9]{1,20}")


@dataclass(frozen=True)
class SessionListCursor:
    """The position of one session in the listing order.

    ``activity_at`` is upstream's activity time (``updated_at``, or a newer agent task of
    the key); this store has no agent tasks, so the cursors it makes carry
    ``activity_at == updated_at`` and the position it reads is ``(updated_at,
    session_key)``. The field stays for callers written against upstream.
    """

    activity_at: int
    updated_at: int
    session_key: str

    def __post_init__(self) -> None:
        check_millis("cursor.activity_at", self.activity_at)
        check_millis("cursor.updated_at", self.updated_at)
        check_text("cursor.session_key", self.session_key, identifier=True)

    @classmethod
    def of(cls, node: SessionNode) -> SessionListCursor:
        """The position of ``node``."""
        return cls(node.updated_at, node.updated_at, node.session_key)

    def encode(self) -> str:
        """The cursor as text: ``<updated_at>:<session_key>`` (what the CLI prints)."""
        return f"{self.updated_at}{CURSOR_SEPARATOR}{self.session_key}"

    @classmethod
    def decode(cls, text: str) -> SessionListCursor:
        """The cursor :meth:`encode` wrote. The key may hold colons: the text is split at
        the first one, and ``updated_at`` is a (signed) integer."""
        check_text("cursor", text)
        updated, separator, key = text.partition(CURSOR_SEPARATOR)
        if not separator or _MILLIS.fullmatch(updated) is None:
            raise InvalidInputError(
                f"cursor {text[:80]!r} is not <updated_at>{CURSOR_SEPARATOR}<session_key> "
                "(as 'sessions list' prints it)"
            )
        at = int(updated)
        return cls(at, at, key)


class SessionListFilter(TypedDict, total=False):
    """The listing's filters, declared once for every layer (``Unpack``): the front door
    passes them canonical (an agent id normalised, lineage keys canonicalised, a key
    prefix as ``keys.canonicalize_key_prefix`` makes it); a filter left out, or ``None``,
    filters nothing. A keyset page takes ``agent_id``, ``status`` and ``key_prefix``.
    ``key_prefix``: the sessions whose key starts with it, byte-exact (an empty prefix
    filters nothing)."""

    agent_id: str | None
    status: str | None
    spawned_by: str | None
    parent_session_key: str | None
    key_prefix: str | None


@dataclass(frozen=True)
class SessionListPage:
    """One page of the listing: ``sessions`` in listing order; ``next_cursor`` (the last
    session's position) is set exactly when ``has_more``: more sessions follow it."""

    sessions: list[SessionNode]
    next_cursor: SessionListCursor | None
    has_more: bool


__all__ = ["CURSOR_SEPARATOR", "SessionListCursor", "SessionListFilter", "SessionListPage"]
