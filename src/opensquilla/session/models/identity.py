"""Message identity: the id a caller gives a message so that writing it again replaces it
instead of adding a second row (docs/semantics.md#message-id), and the reservation of an
assistant message's id before the reply exists."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import ConfigDict, TypeAdapter, ValidationError

from ..errors import InvalidInputError
from ..keys import canonicalize_session_key
from .checks import JSONObject, check_optional_text, check_text, invalid_input

_TURN_CONTEXT: TypeAdapter[dict[str, Any] | None] = TypeAdapter(
    JSONObject | None, config=ConfigDict(title="turn_context")
)


def check_message_id(name: str, value: object, *, optional: bool = False) -> str:
    """A caller-supplied id: a string with something besides whitespace, no NUL.
    ``optional`` says the argument may be left out (``None``), which the message says."""
    text = check_text(name, value, identifier=True)
    if not text.strip():
        when = " when supplied" if optional else ""
        raise InvalidInputError(f"{name} must be a non-empty string{when}")
    return text


def chosen_message_id(message_id: object, assistant_message_id: object) -> str | None:
    """The message id an append was given (either name, or both when equal), or ``None``
    for a new random one."""
    given = [
        check_message_id(name, value, optional=True)
        for name, value in (
            ("message_id", message_id),
            ("assistant_message_id", assistant_message_id),
        )
        if value is not None
    ]
    if len(given) == 2 and given[0] != given[1]:
        raise InvalidInputError("message_id and assistant_message_id must match")
    return given[0] if given else None


def check_turn_context(value: object) -> dict[str, Any] | None:
    """``value`` as a ``turn_context`` argument: the field's domain (a JSON object whose
    keys are strings, or ``None``)."""
    try:
        return _TURN_CONTEXT.validate_python(value)
    except ValidationError as exc:
        raise invalid_input(exc) from exc


@dataclass(frozen=True, slots=True)
class AssistantMessageReservation:
    """The id an assistant reply will be stored under, fixed before the reply exists.

    A reservation is a value, not a row: nothing is written until the reply (a draft, the
    final text, a replay) is appended with ``message_id=assistant_message_id``, and every
    such append replaces the same one row. ``session_key`` is canonical.
    """

    turn_id: str
    assistant_message_id: str
    session_key: str
    channel_id: str | None = None

    @classmethod
    def reserve(
        cls,
        turn_id: str,
        assistant_message_id: str,
        session_key: str,
        channel_id: str | None = None,
    ) -> AssistantMessageReservation:
        """Check the ids (blank ones are refused) and canonicalise the key."""
        key = canonicalize_session_key(session_key)
        if not key:
            raise InvalidInputError("session_key must not be empty")
        return cls(
            turn_id=check_message_id("turn_id", turn_id),
            assistant_message_id=check_message_id("assistant_message_id", assistant_message_id),
            session_key=key,
            channel_id=check_optional_text("channel_id", channel_id, identifier=True),
        )
