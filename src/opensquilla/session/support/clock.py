"""Wall-clock time and identifiers, in the forms the store persists."""

from __future__ import annotations

import os
import time
import uuid


def now_ms() -> int:
    """Milliseconds since the Unix epoch (UTC wall clock)."""
    return time.time_ns() // 1_000_000


def new_session_id() -> str:
    return str(uuid.uuid4())


# A random (version 4, RFC 4122 variant) UUID's bits, as ``uuid.uuid4()`` sets them.
_CLEAR = ~((0xF000 << 64) | (0xC000 << 48))
_SET = (0x4000 << 64) | (0x8000 << 48)


def new_message_id() -> str:
    """``str(uuid.uuid4())``, formatted without building the ``UUID`` object (every append
    makes one of these)."""
    h = "%032x" % (int.from_bytes(os.urandom(16), "big") & _CLEAR | _SET)
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def new_compaction_id() -> str:
    return "cmp_" + uuid.uuid4().hex
