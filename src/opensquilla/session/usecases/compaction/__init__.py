"""Compaction's use cases: each takes the unit of work first and opens one unit per phase.

* ``run.py``: :func:`compact_with_result` reads the source, plans (the pure engine,
  ``compaction/``) and joins the single flight; :class:`Compactor`, the manager's wiring.
* ``decision.py``: :func:`needs_compaction`, the same read and plan, and the plan's decision.
* ``execute.py``: a flight's run: the lease, the summariser outside any transaction, the
  fenced commit.
* ``commit.py``: :func:`rewrite_compacted_session`, the atomic rewrite that re-checks the
  preimage.
* ``flight.py``: single flight in one process (the flight key, the registry per unit of work).
* ``lease.py``: single flight across processes (the lease in the database, and its rows).
* ``persist.py``: storing a summary the caller already has.
* ``source.py``: the captured source of an inline compaction, and the preimage.
* ``options.py``: the options the compaction calls take, and the front door's checks.
* ``record.py``: the summary row both paths store.
* ``summaries.py``: the summary rows and the compacted archive, one unit of work a call.
* ``repair.py``: the repair queue.
"""

from __future__ import annotations

from .commit import ContextStateChanged, rewrite_compacted_session
from .decision import needs_compaction
from .flight import flight_key, running_flights
from .lease import WAIT_MESSAGE
from .options import (
    CompactionOptions,
    MutationContext,
    PersistOptions,
    PersistSourceOptions,
    check_compaction_call,
    entered,
)
from .persist import check_persist_call, persist_compaction_result
from .run import Compactor, compact_with_result
from .source import capture_compaction_source, check_source_entries, source_preimage

__all__ = [
    "WAIT_MESSAGE",
    "CompactionOptions",
    "Compactor",
    "ContextStateChanged",
    "MutationContext",
    "PersistOptions",
    "PersistSourceOptions",
    "capture_compaction_source",
    "check_compaction_call",
    "check_persist_call",
    "check_source_entries",
    "compact_with_result",
    "entered",
    "flight_key",
    "needs_compaction",
    "persist_compaction_result",
    "rewrite_compacted_session",
    "running_flights",
    "source_preimage",
]
