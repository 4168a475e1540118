"""Whether anyone watches an engine's statements (then the direct path stands aside).

``db/direct_statement.py`` runs a statement on the pool's DBAPI connection only while no
listener would miss it: :func:`statements_watched` looks at the engine's statement events
(on the engine, its parent engine or the ``Engine`` class) and its logging, per call, so a
listener attached after ``connect()`` is honoured at the next statement. The store's own
listeners (:func:`own_listeners`) do not count.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable
from typing import Any

from sqlalchemy.engine import Engine
from sqlalchemy.event.base import _JoinedDispatcher

# Engine events that see a statement or its commit. The Connection path fires them; here
# none would, so any listener sends the statement there.
CONNECTION_EVENTS = (
    "before_cursor_execute",
    "after_cursor_execute",
    "before_execute",
    "after_execute",
    "commit",
)
# Connection events the store itself listens to: "begin" (the SQLite BEGIN recipe; an
# autocommit statement begins nothing) and "engine_connect" (SQLAlchemy's own listener on an
# engine view with an isolation level, to set it on each Connection: done here too, see
# ``_isolation``); and "rollback". Those listeners (:func:`own_listeners`) do not count; any
# other one sends the statement through the Connection, which fires these events.
QUIET_EVENTS = ("begin", "engine_connect", "rollback")
_OWN_LISTENERS: weakref.WeakSet[Callable[..., Any]] = weakref.WeakSet()
# Statement auditors (the test suite's, tests/statement_audit.py): a ``before_cursor_execute``
# listener registered with :func:`add_auditor` leaves the statement on the direct path, which
# hands it each statement's SQL itself (:data:`DIRECT_AUDITORS`).
_AUDIT_LISTENERS: weakref.WeakSet[Callable[..., Any]] = weakref.WeakSet()
DIRECT_AUDITORS: list[Callable[[str], None]] = []
DIALECT_EVENTS = ("handle_error", "do_execute")  # ``event.listen(engine, ...)`` puts them here


def statements_watched(engine: Engine) -> bool:
    """Whether something watches ``engine``'s statements: a listener on one of the
    statement events (on the engine, its parent engine, or the ``Engine`` class), one
    other than the store's own on ``begin``, ``engine_connect`` or ``rollback``, or
    statement logging (``echo``, or the ``sqlalchemy.engine`` logger at INFO).

    Checked at every append, so it reads the listener collections themselves: an engine
    view's (``execution_options``) own and its parents', each of which also holds the
    class-level listeners of its engine class. Through the view's joined dispatch each
    lookup builds and walks a joined collection, which cost more than the rest of this
    check (bench/RESULTS.md, 2026-12-02)."""
    own = _OWN_LISTENERS
    auditors = _AUDIT_LISTENERS
    for dispatch in _plain_dispatches(engine):
        for name in CONNECTION_EVENTS:
            listeners = getattr(dispatch, name)
            if listeners and (not auditors or any(fn not in auditors for fn in listeners)):
                return True
        for name in QUIET_EVENTS:
            listeners = getattr(dispatch, name)
            if listeners:
                for fn in listeners:
                    if fn not in own:
                        return True
    dialect_dispatch = engine.dialect.dispatch
    for name in DIALECT_EVENTS:
        if getattr(dialect_dispatch, name):
            return True
    return engine.logger.isEnabledFor(logging.INFO)  # what Engine._should_log_info() checks


# Per engine (a view of another included): its own dispatch and its parents', each plain.
_DISPATCHES: weakref.WeakKeyDictionary[Engine, tuple[Any, ...]] = weakref.WeakKeyDictionary()


def _plain_dispatches(engine: Engine) -> tuple[Any, ...]:
    """The dispatch objects behind ``engine.dispatch``: for an engine view the view's own
    listeners (``local``) and, in turn, its parents'; fixed for the engine's life (a
    listener added later lands in one of their collections)."""
    found = _DISPATCHES.get(engine)
    if found is None:
        chain: list[Any] = []
        dispatch: Any = engine.dispatch
        while isinstance(dispatch, _JoinedDispatcher):
            chain.append(dispatch.local)
            dispatch = dispatch.parent
        chain.append(dispatch)
        found = _DISPATCHES[engine] = tuple(chain)
    return found


def own_listeners(*listeners: Callable[..., Any]) -> None:
    """Mark ``listeners`` (on a :data:`QUIET_EVENTS` event) as the store's own: they
    leave the statement on the direct path."""
    _OWN_LISTENERS.update(listeners)


def add_auditor(listener: Callable[..., Any], direct: Callable[[str], None]) -> None:
    """Mark ``listener`` (on ``before_cursor_execute``) as a statement auditor: it leaves
    the statement on the direct path, which calls ``direct`` with each statement's SQL."""
    _AUDIT_LISTENERS.add(listener)
    DIRECT_AUDITORS.append(direct)


def remove_auditor(listener: Callable[..., Any], direct: Callable[[str], None]) -> None:
    _AUDIT_LISTENERS.discard(listener)
    if direct in DIRECT_AUDITORS:
        DIRECT_AUDITORS.remove(direct)


def view_listeners(view: Engine, base: Engine) -> list[Callable[..., Any]]:
    """The ``engine_connect`` listeners SQLAlchemy put on the engine view ``view`` of
    ``base`` (``execution_options(isolation_level=...)``), not ``base``'s."""
    inherited = set(base.dispatch.engine_connect)
    return [fn for fn in view.dispatch.engine_connect if fn not in inherited]
