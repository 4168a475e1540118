"""The generation each session key was last seen at, so that an append needs no read.

Appends fence on ``(session_id, epoch)``, so a stale entry (another process reset or
re-created the session) is caught by the database and refreshed, never trusted
(docs/semantics.md#fencing).
"""

from __future__ import annotations

from collections import OrderedDict

from ..errors import SessionNotFoundError
from ..keys import canonicalize_session_key
from ..models import SessionNode, check_integer

GENERATION_CACHE_SIZE = 10_000


class GenerationCache:
    """``key -> (session_id, epoch)``, least recently used first, bounded."""

    def __init__(self, size: int = GENERATION_CACHE_SIZE) -> None:
        self._size = size
        self._entries: OrderedDict[str, tuple[str, int]] = OrderedDict()

    def cached_epoch(self, session_key: str) -> int | None:
        cached = self._entries.get(canonicalize_session_key(session_key))
        return cached[1] if cached is not None else None

    def observe_epoch(self, session_key: str, epoch: int) -> None:
        """Someone saw ``epoch``: a different cached one is dropped (read again next time)."""
        check_integer("epoch", epoch)
        key = canonicalize_session_key(session_key)
        cached = self._entries.get(key)
        if cached is not None and cached[1] != epoch:
            del self._entries[key]

    def remember(self, node: SessionNode) -> SessionNode:
        self._entries[node.session_key] = (node.session_id, node.epoch)
        self._entries.move_to_end(node.session_key)
        if len(self._entries) > self._size:
            self._entries.popitem(last=False)
        return node

    def forget(self, key: str) -> None:
        self._entries.pop(key, None)

    def found(self, key: str, node: SessionNode | None) -> SessionNode:
        """``node``, the row of canonical ``key`` just read inside the caller's unit of
        work, remembered; ``None``: ``SessionNotFoundError``."""
        if node is None:
            self.forget(key)
            raise SessionNotFoundError(f"Session not found: {key}")
        return self.remember(node)

    def cached(self, key: str) -> tuple[str, int] | None:
        """``(session_id, epoch)`` last seen for canonical ``key``, or ``None`` (read it
        inside the caller's unit of work and pass it to :meth:`found`)."""
        return self._entries.get(key)
