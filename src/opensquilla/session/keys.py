"""Session-key and agent-id canonicalisation (docs/semantics.md#keys).

Users address sessions with any spelling (``agent:Main:main``, ``webchat:default``); the
store keeps one canonical form so that every spelling reaches the same row.
"""

from __future__ import annotations

import functools
import re
from typing import NewType

from .errors import InvalidSessionKeyError

MAX_SESSION_KEY_LENGTH = 512
_AGENT_ID_LIMIT = 64
_AGENT_ID_OUTSIDE = re.compile(r"[^a-z0-9_-]")
# Characters no key may hold: NUL (Postgres refuses it in text) and surrogate code points
# (not encodable as UTF-8 on either backend).
_FORBIDDEN_IN_KEY = re.compile("[\x00\ud800-\udfff]")

# A key in its canonical form, as the front door (the manager's and the storage's public
# methods) hands it inward: below the front door a key is trusted, never canonicalised again.
CanonicalKey = NewType("CanonicalKey", str)


def normalize_agent_id(value: str | None) -> str:
    """``None``, blank and ``default`` become ``main``; otherwise a safe lowercase slug."""
    if value is None:
        return "main"
    text = str(value).strip().lower()
    if not text or text == "default":
        return "main"
    slug = _AGENT_ID_OUTSIDE.sub("-", text).strip("-")[:_AGENT_ID_LIMIT]
    if not slug or slug == "default":
        return "main"
    return slug


def canonicalize_session_key(key: str) -> CanonicalKey:
    """Return the canonical form of ``key`` (trimmed; agent segment normalised).

    Raises :class:`InvalidSessionKeyError` for a non-string, an over-long key, or a key
    holding NUL or surrogate code points, so such a key never reaches the database.
    """
    # An append canonicalises its key several times on the way (the call, the entry's
    # field, the storage): a plain string of a key's size is looked up in a cache of the
    # pure function below. A refusal is an exception, which the cache never keeps.
    if type(key) is str and len(key) <= MAX_SESSION_KEY_LENGTH:
        return _remembered_canonical_key(key)
    if not isinstance(key, str):
        raise InvalidSessionKeyError(f"session key must be a string, not {type(key).__name__}")
    return _canonical_key(key)


def _canonical_key(key: str) -> CanonicalKey:
    text = key.strip()
    if len(text) > MAX_SESSION_KEY_LENGTH:
        raise InvalidSessionKeyError(
            f"session key is {len(text)} characters long; the limit is {MAX_SESSION_KEY_LENGTH}"
        )
    if _FORBIDDEN_IN_KEY.search(text):
        raise InvalidSessionKeyError(
            "session key must not contain NUL characters or unpaired surrogates"
        )
    canonical = _canonical(text)
    # Normalising the agent segment can lengthen it ("İ" lowercases to two characters),
    # and the stored form is what the index bounds assume.
    if len(canonical) > MAX_SESSION_KEY_LENGTH:
        raise InvalidSessionKeyError(
            f"session key is {len(canonical)} characters long once canonical; the limit is "
            f"{MAX_SESSION_KEY_LENGTH}"
        )
    return CanonicalKey(canonical)


_remembered_canonical_key = functools.lru_cache(maxsize=4096)(_canonical_key)


def _canonical(text: str) -> str:
    if not text:
        return ""
    if text == "webchat:default":
        return "agent:main:webchat:default"
    if text.startswith("subagent:agent:"):
        return "subagent:" + _canonical(text[len("subagent:") :])
    if text.startswith("agent:"):
        parts = text.split(":")
        parts[1] = normalize_agent_id(parts[1])
        return ":".join(parts)
    return text


def require_session_key(key: str) -> CanonicalKey:
    """Canonicalise ``key`` and refuse the empty key (for calls that create rows)."""
    canonical = canonicalize_session_key(key)
    if not canonical:
        raise InvalidSessionKeyError("session key must not be empty")
    return canonical


def canonicalize_key_prefix(prefix: str) -> str:
    """The canonical form of a key prefix (the listing's ``key_prefix``): the prefix as
    given, except a *complete* agent segment (``agent:<id>:``, also after ``subagent:``),
    which is normalised as a key's is, so ``agent:Main:app:user:`` selects the keys
    ``agent:main:app:user:…``. Nothing else changes: no trimming, no case folding, an
    incomplete agent segment (``agent:Ma``) compared as given (docs/semantics.md#key-prefix).
    ``prefix`` is a checked ``str``."""
    head = ""
    rest = prefix
    if rest.startswith("subagent:agent:"):
        head, rest = "subagent:", rest[len("subagent:") :]
    if rest.startswith("agent:"):
        agent, colon, tail = rest[len("agent:") :].partition(":")
        if colon:
            rest = f"agent:{normalize_agent_id(agent)}:{tail}"
    return head + rest


def agent_key_prefix(agent_id: str | None) -> str:
    """The key prefix every session of ``agent_id`` starts with (``agent:<id>:``)."""
    return f"agent:{normalize_agent_id(agent_id)}:"
