"""The session key of an Agents SDK session: ``agent:<agent_id>:openai-agents:<session_id>``.

The SDK's ``session_id`` is any string; a store key is trimmed, may not hold NUL, and its
agent segment is normalised (docs/semantics.md#keys). So the ``session_id`` goes into the
key percent-encoded (``urllib.parse.quote``, ``:`` kept as it is): every character outside
``A-Z a-z 0-9 _ . - ~ :`` becomes ``%XX`` of its UTF-8 bytes, so nothing the store does to a
key can change it, and :func:`parse_session_key` gives back exactly the ``session_id``. The
``agent_id`` is normalised as the store normalises every agent id (lowercase slug;
``None``, blank and ``default`` are ``main``), so it reads back in that form.
"""

from __future__ import annotations

from urllib.parse import quote, unquote

from ...errors import InvalidSessionKeyError
from ...keys import MAX_SESSION_KEY_LENGTH, normalize_agent_id

NAMESPACE = "openai-agents"
_SAFE = ":"


def session_key(session_id: str, agent_id: str | None = "main") -> str:
    """The store key of the SDK session ``session_id`` of ``agent_id``.

    ``InvalidSessionKeyError`` (a ``ValueError``) for a ``session_id`` that is not a
    string, holds an unpaired surrogate (not UTF-8) or makes a key over 512 characters."""
    if not isinstance(session_id, str):
        raise InvalidSessionKeyError(
            f"session_id must be a string, not {type(session_id).__name__}"
        )
    try:
        encoded = quote(session_id, safe=_SAFE, errors="strict")
    except UnicodeEncodeError as exc:
        raise InvalidSessionKeyError(
            "session_id must not contain unpaired surrogates (they cannot be UTF-8)"
        ) from exc
    key = f"agent:{normalize_agent_id(agent_id)}:{NAMESPACE}:{encoded}"
    if len(key) > MAX_SESSION_KEY_LENGTH:
        raise InvalidSessionKeyError(
            f"the session key of this session_id is {len(key)} characters long (the "
            f"session_id percent-encoded); the limit is {MAX_SESSION_KEY_LENGTH}"
        )
    return key


def parse_session_key(key: str) -> tuple[str, str]:
    """``(agent_id, session_id)`` of a key made by :func:`session_key`;
    ``InvalidSessionKeyError`` for any other key."""
    parts = key.split(":", 3) if isinstance(key, str) else []
    if len(parts) != 4 or parts[0] != "agent" or parts[2] != NAMESPACE or not parts[1]:
        raise InvalidSessionKeyError(
            f"not an OpenAI Agents SDK session key (agent:<agent_id>:{NAMESPACE}:<session_id>)"
        )
    try:
        session_id = unquote(parts[3], errors="strict")
    except UnicodeDecodeError as exc:
        raise InvalidSessionKeyError("the key's session_id is not percent-encoded UTF-8") from exc
    return parts[1], session_id
