"""A state row's compare-and-set as statements (``StateRow``), for the unit of work that
runs it without a transaction (``uow.compare_and_set_state``): the session's and the
scope's, built from ``states``' statements."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Select, bindparam, select

from .states import (
    StoredState,
    decoded_state,
    found_of_row,
    scope_state_write,
    scope_states,
    session_state_read,
    session_state_write,
)


@dataclass(frozen=True, slots=True)
class StateRow:
    """One state row's compare-and-set as statements, for a unit of work that runs it
    without a transaction (``uow.compare_and_set_state``): the ``read`` (bound by
    ``params``), what its row as the driver returned it is (``found``: the stored state, or
    ``(session_id, stored state)`` for a session's), and the write of the values an update
    decided (``write``: the statement and its parameters)."""

    read: Select[Any]
    params: dict[str, str]
    found: Callable[[tuple[Any, ...] | None], Any]
    write: Callable[..., tuple[Any, dict[str, Any]]]


def session_state_row(dialect_name: str, session_key: str) -> StateRow:
    """The session ``session_key``'s state row (:func:`found_of_row`; the write takes
    ``session_id``, ``state``, ``revision``, ``now``, ``stored_revision``)."""
    return StateRow(
        session_state_read(dialect_name),
        {"session_key": session_key},
        found_of_row,
        functools.partial(session_state_write, dialect_name, session_key),
    )


@functools.cache
def _scope_read() -> Select[Any]:
    return select(scope_states.c.state, scope_states.c.revision, scope_states.c.updated_at).where(
        scope_states.c.scope == bindparam("scope"), scope_states.c.scope_id == bindparam("scope_id")
    )


def _scope_found(row: tuple[Any, ...] | None) -> StoredState | None:
    if row is None:
        return None
    state, revision, updated_at = row
    return StoredState(None, decoded_state(state), int(revision), int(updated_at))


def scope_state_row(dialect_name: str, scope: str, scope_id: str) -> StateRow:
    """The state row of ``(scope, scope_id)`` (the stored state or ``None``; the write
    takes ``state``, ``revision``, ``now``, ``stored_revision``)."""
    return StateRow(
        _scope_read(),
        {"scope": scope, "scope_id": scope_id},
        _scope_found,
        functools.partial(scope_state_write, dialect_name, scope, scope_id),
    )
