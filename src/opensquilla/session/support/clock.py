"""Wall-clock time and identifiers, in the forms the store persists."""

from __future__ import annotations

import time
import uuid


def now_ms() -> int:
    """Milliseconds since the Unix epoch (UTC wall clock)."""
    return time.time_ns() // 1_000_000


def new_session_id() -> str:
    return str(uuid.uuid4())


def new_message_id() -> str:
    return str(uuid.uuid4())


def new_compaction_id() -> str:
    return "cmp_" + uuid.uuid4().hex
