"""Pausing Python's cyclic garbage collector around a bulk build of acyclic objects.

Building 100,000 records allocates a few hundred thousand container objects that all stay
alive. The collector counts them, and every so many it walks the young ones and, every
time the surviving ones grew the heap by a quarter, the whole heap: a read of 100k entries
set off several full collections, which cost more than building the records did. Nothing
such a build creates can be cyclic garbage, so those collections are pure overhead.

:func:`gc_paused` switches the collector off for the duration of a block that never awaits
(so no other task runs inside it) and back on afterwards if it was on before the first of
any overlapping pauses (threads may overlap theirs). Reference counting goes on as always;
only the search for cycles waits, and it resumes, with its counts intact, right after.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

_lock = threading.Lock()
_depth = 0
_resume = False


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """The collector off inside the block (a no-op where it was already off)."""
    global _depth, _resume
    with _lock:
        if _depth == 0:
            _resume = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _resume:
                gc.enable()
