"""Session state and scoped state (docs/state.md): what a read returns, and the one check of
an update's arguments.

A state is a JSON object the store never reads, kept with a ``revision``: 0 before the first
update, one more with each update. An update merges ``changes`` into the state shallowly
(each top-level key replaced or added, the order of the keys kept: an existing key keeps
its place, a new one goes last) and drops the keys of ``remove``; given an
``expected_revision``, it is a compare-and-set.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast, get_args

from pydantic import BaseModel, ConfigDict

from ..errors import InvalidInputError
from .checks import check_integer, check_text, describe

StateScope = Literal["app", "user"]
"""The scopes wider than one session: state of an application, of a user."""
STATE_SCOPES: tuple[str, ...] = get_args(StateScope)

MAX_STATE_BYTES = 16 * 1024 * 1024
"""The largest state, as its UTF-8 JSON text (the changes of one update too)."""
MAX_STATE_DEPTH = 100
"""How deeply a state's values may nest (an object or list in an object is depth 2)."""
MAX_SCOPE_ID_LENGTH = 512


class _State(BaseModel):
    """A state as read: ``state`` (a JSON object; ``{}`` before the first update),
    ``revision`` (0 before the first update) and ``updated_at`` (milliseconds, ``None``
    before the first update)."""

    model_config = ConfigDict(frozen=True)

    state: dict[str, Any]
    revision: int
    updated_at: int | None = None


class SessionState(_State):
    """The state of one session's current generation (``session_id``)."""

    session_key: str
    session_id: str


class ScopeState(_State):
    """The state of one ``scope`` (``"app"`` or ``"user"``) and ``scope_id``."""

    scope: StateScope
    scope_id: str


@dataclass(frozen=True, slots=True)
class StateChange:
    """An update's checked arguments: ``changes`` (a plain ``dict``, its keys in the order
    given), the keys to ``remove`` and the ``expected_revision`` (``None``: no
    compare-and-set)."""

    changes: dict[str, Any]
    remove: tuple[str, ...]
    expected_revision: int | None

    def applied_to(self, state: Mapping[str, Any]) -> dict[str, Any]:
        """``state`` with the changes merged in and the removed keys dropped (a new dict)."""
        merged = dict(state)
        merged.update(self.changes)
        for name in self.remove:
            merged.pop(name, None)
        return merged


_SCALARS = (str, int, float, bool, type(None))


def _check_json_object(name: str, value: object) -> dict[str, Any]:
    """``value`` as a JSON object that reads back exactly as given: only ``dict`` (with
    ``str`` keys), ``list``, ``str``, ``int``, ``float`` (finite), ``bool`` and ``None``, of
    those exact types (a tuple would read back as a list, a ``str`` subclass as a plain
    ``str``), nested at most :data:`MAX_STATE_DEPTH` deep; walked without recursion."""
    if type(value) is not dict:
        raise InvalidInputError(f"{name} must be a dict (a JSON object), not {describe(value)}")
    pending: list[tuple[object, int, str]] = [(value, 1, name)]
    while pending:
        item, depth, where = pending.pop()
        kind = type(item)
        if kind is dict or kind is list:
            if depth > MAX_STATE_DEPTH:
                raise InvalidInputError(f"{where} is nested more than {MAX_STATE_DEPTH} deep")
            if isinstance(item, dict):
                for key, inner in item.items():
                    if type(key) is not str:
                        raise InvalidInputError(
                            f"{where} has a key of type {type(key).__name__}; JSON object "
                            "keys are strings"
                        )
                    pending.append((inner, depth + 1, f"{where}[{key!r:.40}]"))
            elif isinstance(item, list):
                for index, inner in enumerate(item):
                    pending.append((inner, depth + 1, f"{where}[{index}]"))
        elif isinstance(item, float) and kind is float:
            if not math.isfinite(item):
                raise InvalidInputError(f"{where} is {item!r}, which is not JSON")
        elif kind not in _SCALARS:
            raise InvalidInputError(f"{where} is {describe(item)}, which is not a JSON value")
    return cast(dict[str, Any], value)


def state_size(state: Mapping[str, Any]) -> int:
    """The size of ``state`` as UTF-8 JSON text (refusing an unpaired surrogate, which
    cannot be stored as UTF-8)."""
    text = json.dumps(state, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidInputError(
            "the state holds an unpaired surrogate, which cannot be stored as UTF-8; "
            "nothing was written"
        ) from None


def check_state_change(changes: object, remove: object, expected_revision: object) -> StateChange:
    """The arguments of ``update_state`` / ``update_scope_state``, checked once: ``changes``
    a JSON object (:func:`_check_json_object`) of at most :data:`MAX_STATE_BYTES`,
    ``remove`` a list or tuple of ``str`` (not a single string) naming none of the keys of
    ``changes``, ``expected_revision`` an integer >= 0 or ``None``."""
    checked = _check_json_object("changes", changes)
    if not isinstance(remove, list | tuple):
        raise InvalidInputError(f"remove must be a list of keys, not {describe(remove)}")
    names = tuple(check_text(f"remove[{index}]", name) for index, name in enumerate(remove))
    both = [name for name in names if name in checked]
    if both:
        raise InvalidInputError(
            f"remove names {both[0]!r}, which changes sets too; nothing was written"
        )
    if expected_revision is not None:
        check_integer("expected_revision", expected_revision)
    if state_size(checked) > MAX_STATE_BYTES:
        raise InvalidInputError(
            f"changes are larger than {MAX_STATE_BYTES} bytes as JSON; nothing was written"
        )
    return StateChange(dict(checked), names, cast(int | None, expected_revision))


def check_scope(scope: object, scope_id: object) -> tuple[StateScope, str]:
    """A scope (one of :data:`STATE_SCOPES`) and its id (non-empty text without NUL, at
    most :data:`MAX_SCOPE_ID_LENGTH` characters), as given: scope ids are not keys, so
    nothing is canonicalised."""
    if type(scope) is not str or scope not in STATE_SCOPES:
        raise InvalidInputError(
            f"scope must be one of {', '.join(map(repr, STATE_SCOPES))}, not {describe(scope)}"
        )
    ident = check_text(
        "scope_id", scope_id, identifier=True, max_length=MAX_SCOPE_ID_LENGTH, non_empty=True
    )
    return cast(StateScope, scope), ident


def scope_label(scope: str, scope_id: str) -> str:
    """How an error names a scope's state."""
    return f"{scope} scope {scope_id!r}"


__all__: Sequence[str] = [
    "MAX_SCOPE_ID_LENGTH",
    "MAX_STATE_BYTES",
    "MAX_STATE_DEPTH",
    "STATE_SCOPES",
    "ScopeState",
    "SessionState",
    "StateChange",
    "StateScope",
    "check_scope",
    "check_state_change",
    "scope_label",
    "state_size",
]
