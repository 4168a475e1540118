"""Single-flight compaction (docs/semantics.md#single-flight, HEAD-FEATURES §5.1).

Concurrent ``compact_with_result`` calls of one session with equal inputs share one run
(summarise -> validate -> commit) and get the same result object. The inputs are folded
into a *flight key*; the registry of running flights is kept per unit-of-work factory (one
per connected storage, bound to one event loop), and an entry leaves when its task ends.
Joining a flight opens no unit of work.

The first caller starts the shared task; every caller (the first included) awaits it
through :func:`asyncio.shield`, so cancelling or timing out one caller never cancels the
run the others wait for. When the last interested caller is cancelled before the commit has
begun, the run is cancelled (nothing was written); a commit that has begun runs to its end.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import hmac
import json
import secrets
import weakref
from collections.abc import Callable, Coroutine
from typing import Any

from ...compaction import CompactionConfig, CompactionResult
from ...db.uow import UnitOfWork

# A per-process random key: a secret that decides the flight (the API key of a config) is
# folded in only as an HMAC under it, so no key, log or dump ever holds the secret.
_PROCESS_KEY = secrets.token_bytes(32)


def secret_fingerprint(value: str) -> str:
    """An HMAC-SHA-256 of ``value`` under the per-process key (``""`` stays ``""``)."""
    if not value:
        return ""
    return hmac.new(_PROCESS_KEY, value.encode("utf-8"), hashlib.sha256).hexdigest()


def _sha256(value: str | None) -> str | None:
    return None if value is None else hashlib.sha256(value.encode("utf-8")).hexdigest()


def config_fingerprint(config: CompactionConfig, *, portable: bool = False) -> dict[str, Any]:
    """Every knob of ``config``; the API key only as its :func:`secret_fingerprint`, or
    (``portable``: the same in every process) not at all."""
    shown: dict[str, Any] = {}
    for name in type(config).model_fields:
        value = getattr(config, name)
        if name == "api_key":
            if portable:
                continue
            value = secret_fingerprint(value)
        shown[name] = value
    return shown


def flight_key(
    *,
    session_key: str,
    session_id: str,
    epoch: int,
    preimage: str,
    context_window_tokens: int,
    config: CompactionConfig,
    custom_instructions: str | None,
    flush_receipt_status: str | None,
    compaction_id: str | None,
    against_source: bool,
    summarizer_identity: str,
    protected_boundary_message_id: str | None,
    context_fingerprint: str | None = None,
    portable: bool = False,
) -> str:
    """The SHA-256 (hex) of everything that decides what a compaction writes; ``preimage``
    is :func:`.source.source_preimage` of the planned live rows.

    ``trigger_reason`` is left out: it is a label, and the owner's is the one stored. An
    explicit ``compaction_id`` is in: a caller naming its compaction gets that one or its
    own run, never another caller's summary under a different name. So is the protected
    boundary: two boundaries are two flights even where they protect the same rows, and
    (rolling checkpoints) the fingerprint of the checkpoints the summary replaces.
    ``portable``: the key of the cross-process lease (``lease.py``), equal in
    every process for equal inputs, so without the API key (workers of one deployment share
    one result whichever key each holds) and with a ``summarizer_identity`` that names a
    class, not an object.
    """
    payload = {
        "session_key": session_key,
        "session_id": session_id,
        "epoch": epoch,
        "live": preimage,
        "context_window_tokens": context_window_tokens,
        "config": config_fingerprint(config, portable=portable),
        "custom_instructions": _sha256(custom_instructions),
        "flush_receipt_status": flush_receipt_status,
        "compaction_id": compaction_id,
        "against_source": against_source,
        "summarizer": summarizer_identity,
        "protected_boundary_message_id": protected_boundary_message_id,
        "context_fingerprint": context_fingerprint,
    }
    encoded = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=repr)
    return hashlib.sha256(encoded.encode("utf-8")).hexdigest()


@dataclasses.dataclass(eq=False)
class Flight:
    """One running compaction and how many callers are waiting for it."""

    task: asyncio.Task[CompactionResult] | None = None
    callers: int = 0
    committing: bool = False


_REGISTRY: weakref.WeakKeyDictionary[UnitOfWork, dict[str, Flight]] = weakref.WeakKeyDictionary()


def running_flights(uow: UnitOfWork) -> dict[str, Flight]:
    """The flights running on ``uow`` (a connected storage's ``storage.uow``, which belongs
    to one event loop), by key."""
    flights = _REGISTRY.get(uow)
    if flights is None:
        flights = {}
        _REGISTRY[uow] = flights
    return flights


async def join_flight(
    uow: UnitOfWork,
    key: str,
    start: Callable[[Flight], Coroutine[Any, Any, CompactionResult]],
) -> CompactionResult:
    """The result of the flight ``key`` on ``uow``, starting it with ``start`` when no
    equal flight is running."""
    flights = running_flights(uow)
    flight = flights.get(key)
    if flight is None or flight.task is None or flight.task.done():
        flight = Flight()
        task = asyncio.get_running_loop().create_task(start(flight))
        flight.task = task
        flights[key] = flight

        def leave(done: asyncio.Task[CompactionResult], flight: Flight = flight) -> None:
            if flights.get(key) is flight:
                del flights[key]
            if not done.cancelled():
                done.exception()  # retrieved: a run nobody awaits any more logs nothing

        task.add_done_callback(leave)
    task = flight.task
    assert task is not None
    flight.callers += 1
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        if flight.callers == 1 and not task.done():
            if not flight.committing:
                # Nobody else wants it and nothing was written: a caller arriving from
                # now on starts a fresh flight rather than join a cancelled one.
                if flights.get(key) is flight:
                    del flights[key]
                task.cancel()
            # Wait for the run to end (cancelled, or a commit running to its end), so the
            # store is settled when the cancellation reaches the caller.
            await asyncio.wait({task})
        raise
    finally:
        flight.callers -= 1
