"""The session key of an ADK session, and the scope ids of its app and user state.

A key is ``agent:<agent_id>:adk:<app>:<user>:<session>`` where each of ``<app>``,
``<user>`` and ``<session>`` is the ADK value with ``%``, ``:``, whitespace and control
characters percent-encoded (their UTF-8 bytes as ``%XX``), and nothing else changed. So
the separators are unambiguous (the prefix ``agent:<agent_id>:adk:<app>:<user>:`` selects
exactly the sessions of that app and user, byte for byte), the store's trimming of a key
never touches a value (an id with a trailing space keeps it), and :func:`parse_session_key`
gives the three values back exactly. This module imports no framework.
"""

from __future__ import annotations

from typing import NamedTuple
from urllib.parse import quote, unquote

from ...keys import MAX_SESSION_KEY_LENGTH, normalize_agent_id

NAMESPACE = "adk"
_ALWAYS_ESCAPED = frozenset("%:")


class AdkSessionAddress(NamedTuple):
    """The ADK coordinates a session key stands for."""

    agent_id: str
    app_name: str
    user_id: str
    session_id: str


def _escaped(char: str) -> bool:
    return char in _ALWAYS_ESCAPED or char.isspace() or not char.isprintable()


def escape_component(value: str, what: str) -> str:
    """``value`` with ``%``, ``:``, whitespace and unprintable characters percent-encoded.

    ``ValueError`` naming ``what`` for a non-string, or for NUL or an unpaired surrogate
    (no store can keep them in a key)."""
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a string, not {type(value).__name__}")
    if "\x00" in value or any("\ud800" <= char <= "\udfff" for char in value):
        raise ValueError(f"{what} must not contain NUL characters or unpaired surrogates")
    if not any(_escaped(char) for char in value):
        return value
    return "".join(quote(char, safe="") if _escaped(char) else char for char in value)


def agent_prefix(agent_id: str) -> str:
    """The prefix of every ADK session key of ``agent_id`` (its canonical form)."""
    return f"agent:{normalize_agent_id(agent_id)}:{NAMESPACE}:"


def app_prefix(agent_id: str, app_name: str) -> str:
    """The key prefix of the sessions of ``app_name``."""
    return f"{agent_prefix(agent_id)}{escape_component(app_name, 'app_name')}:"


def user_prefix(agent_id: str, app_name: str, user_id: str) -> str:
    """The key prefix of the sessions of ``user_id`` in ``app_name``."""
    return f"{app_prefix(agent_id, app_name)}{escape_component(user_id, 'user_id')}:"


def session_key(agent_id: str, app_name: str, user_id: str, session_id: str) -> str:
    """The store's key of an ADK session (module docstring); ``ValueError`` when it
    would be longer than the store's key limit."""
    key = user_prefix(agent_id, app_name, user_id) + escape_component(session_id, "session_id")
    if len(key) > MAX_SESSION_KEY_LENGTH:
        raise ValueError(
            f"the session key of app {app_name!r}, user {user_id!r} and this session id is "
            f"{len(key)} characters long once escaped; the store's limit is "
            f"{MAX_SESSION_KEY_LENGTH}"
        )
    return key


def parse_session_key(key: str) -> AdkSessionAddress:
    """The ADK coordinates of a key made by :func:`session_key`; ``ValueError`` otherwise."""
    parts = key.split(":")
    if len(parts) != 6 or parts[0] != "agent" or parts[2] != NAMESPACE:
        raise ValueError(f"not a Google ADK session key: {key!r}")
    app, user, session = (unquote(part, errors="strict") for part in parts[3:])
    return AdkSessionAddress(parts[1], app, user, session)


def app_scope_id(agent_id: str, app_name: str) -> str:
    """The scope id of the app state of ``app_name`` (scope ``"app"``): the app's key
    prefix without its last colon, ``agent:<agent_id>:adk:<app>``."""
    return app_prefix(agent_id, app_name)[:-1]


def user_scope_id(agent_id: str, app_name: str, user_id: str) -> str:
    """The scope id of the user state of ``user_id`` in ``app_name`` (scope ``"user"``):
    ``agent:<agent_id>:adk:<app>:<user>``."""
    return user_prefix(agent_id, app_name, user_id)[:-1]
