"""Every public operation of a class, timed and reported in one place.

:func:`instrumented` wraps, when the class is created, each public coroutine method it has
(its own and its mixins'), so a method added later is covered without anyone remembering
to; the few left alone are named in the call. When neither debug logging nor
OpenTelemetry is on, a wrapped call costs a check of the logger's level. Otherwise it
writes a debug record to :data:`OPERATIONS_LOGGER` (``operation``, ``session_key``,
``duration_ms``, ``rows``, ``error_type`` as ``extra`` fields) and, with ``opentelemetry``
installed, a span and a histogram measurement (``otel.py``). Only the key, the timing and a
row count are reported: never the arguments, the result's content or an exception's
message.
"""

from __future__ import annotations

import functools
import inspect
import logging
import time
from collections.abc import Callable, Coroutine, Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Final, TypeVar

from ..keys import MAX_SESSION_KEY_LENGTH
from .otel import TELEMETRY, Call

OPERATIONS_LOGGER: Final = "opensquilla.session.ops"
log = logging.getLogger(OPERATIONS_LOGGER)

#: The operations whose durations the histograms keep, by kind (the same names on the
#: manager and on the storage; a manager call is measured, not the storage calls it makes).
LATENCY_KINDS: Final[Mapping[str, str]] = {
    **dict.fromkeys(
        (
            "append_message",
            "append_messages",
            "inject_message",
            "append_transcript_entry",
            "append_message_entry",
            "upsert_transcript_entry_and_touch",
        ),
        "append",
    ),
    **dict.fromkeys(
        (
            "get_transcript",
            "get_canonical_transcript",
            "get_canonical_transcript_page",
            "get_canonical_transcript_entry",
            "get_recent_transcript",
            "get_transcript_lines",
            "get_compacted_transcript_entries",
            "read_transcript",
            "get_context_view",
        ),
        "read",
    ),
    **dict.fromkeys(("compact", "compact_with_result", "persist_compaction_result"), "compaction"),
}
# Integers that some operations return and that count no rows.
_NOT_ROW_COUNTS: Final = frozenset({"get_epoch", "increment_epoch"})
# Results that hold the rows they stand for in a list: a transcript page, a context view,
# transcript lines.
_ROW_FIELDS: Final = ("entries", "messages", "lines")
# Where an operation finds the session key: these parameters, else the first argument's
# ``session_key`` attribute (a node, an entry, a summary, a context state).
_KEY_PARAMETERS: Final = ("session_key", "parent_session_key")

_C = TypeVar("_C", bound=type)
_Method = Callable[..., Coroutine[Any, Any, Any]]
_KeyReader = Callable[[tuple[Any, ...], dict[str, Any]], str | None]


def instrumented(
    prefix: str, *, system: Callable[[Any], str], exclude: frozenset[str] = frozenset()
) -> Callable[[_C], _C]:
    """A class decorator: every public coroutine method of the class, but ``exclude``,
    reports as the operation ``prefix + name``; ``system(self)`` names the database."""

    def decorate(cls: _C) -> _C:
        unknown = exclude - set(dir(cls))
        if unknown:
            raise TypeError(f"{cls.__name__} has no methods {sorted(unknown)} to exclude")
        for name, method in public_coroutine_methods(cls).items():
            if name not in exclude and operation_of(method) is None:
                setattr(cls, name, _wrap(method, prefix, name, system))
        return cls

    return decorate


def public_coroutine_methods(cls: type) -> dict[str, _Method]:
    """The public ``async def`` methods of ``cls`` and its bases (plain functions only: no
    class or static methods, no properties)."""
    found: dict[str, _Method] = {}
    for name in dir(cls):
        if name.startswith("_"):
            continue
        member = inspect.getattr_static(cls, name)
        if inspect.isfunction(member) and inspect.iscoroutinefunction(member):
            found[name] = member
    return found


def operation_of(method: object) -> str | None:
    """The operation an instrumented method reports as, or ``None``."""
    return getattr(method, "__opensquilla_operation__", None)


def _wrap(method: _Method, prefix: str, name: str, system: Callable[[Any], str]) -> _Method:
    operation = prefix + name
    kind = LATENCY_KINDS.get(name)
    counts_rows = name not in _NOT_ROW_COUNTS
    key_of = _key_reader(method)

    @functools.wraps(method)
    async def observed(self: Any, *args: Any, **kwargs: Any) -> Any:
        debug = log.isEnabledFor(logging.DEBUG)
        if TELEMETRY is None and not debug:
            return await method(self, *args, **kwargs)
        key = key_of(args, kwargs)
        scope: AbstractContextManager[Call | None] = (
            nullcontext()
            if TELEMETRY is None
            else TELEMETRY.operation(operation, kind, system(self), key)
        )
        rows: int | None = None
        error: str | None = None  # the type's name: holding the exception would make a cycle
        with scope as call:
            start = time.perf_counter_ns()
            try:
                result = await method(self, *args, **kwargs)
                rows = _rows(result, kind) if counts_rows else None
                return result
            except BaseException as exc:
                error = type(exc).__qualname__
                raise
            finally:
                elapsed_ms = (time.perf_counter_ns() - start) / 1e6
                if call is not None:
                    call.finish(elapsed_ms, rows, error)
                if debug:
                    _log(operation, key, elapsed_ms, rows, error)

    observed.__opensquilla_operation__ = operation  # type: ignore[attr-defined]
    return observed


def _log(
    operation: str,
    key: str | None,
    elapsed_ms: float,
    rows: int | None,
    error: str | None,
) -> None:
    log.debug(
        "operation=%s key=%s duration_ms=%.3f rows=%s error=%s",
        operation,
        key,
        elapsed_ms,
        rows,
        error,
        extra={
            "operation": operation,
            "session_key": key,
            "duration_ms": elapsed_ms,
            "rows": rows,
            "error_type": error,
        },
    )


def _rows(result: object, kind: str | None) -> int | None:
    """The rows a call wrote or returned: one for an append, a count, a list's length, a
    compaction's removed rows, a page's or a context view's entries; else nothing."""
    if kind == "append":
        return 1
    if isinstance(result, bool):
        return None
    if isinstance(result, int):
        return result
    if isinstance(result, list):
        return len(result)
    removed = getattr(result, "removed_count", None)  # a compaction result
    if isinstance(removed, int):
        return removed
    for field in _ROW_FIELDS:
        rows = getattr(result, field, None)
        if isinstance(rows, list):
            return len(rows)
    return None


def _key_reader(method: _Method) -> _KeyReader:
    """Where ``method``'s session key is (see ``_KEY_PARAMETERS``), found once, at wrap
    time; the reader takes the arguments without ``self``."""
    parameters = list(inspect.signature(method).parameters)[1:]
    named = next((name for name in _KEY_PARAMETERS if name in parameters), None)
    if named is not None:
        index = parameters.index(named)
        return lambda args, kwargs: _key_text(
            args[index] if len(args) > index else kwargs.get(named)
        )
    if not parameters:
        return lambda args, kwargs: None
    first = parameters[0]
    return lambda args, kwargs: _key_text(
        getattr(args[0] if args else kwargs.get(first), "session_key", None)
    )


def _key_text(value: object) -> str | None:
    # A key longer than the limit is refused by the operation; the record keeps its head.
    return value[:MAX_SESSION_KEY_LENGTH] if isinstance(value, str) else None
