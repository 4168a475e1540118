"""Session-key and agent-id canonicalisation (SEMANTICS §1.1).

Every spelling of a key must reach the same row, and a key the database could not store
(NUL, lone surrogates, absurd lengths, non-strings) must be refused before any SQL runs.
"""

from __future__ import annotations

from typing import Any

import pytest

from opensquilla.session.errors import InvalidInputError, InvalidSessionKeyError
from opensquilla.session.keys import (
    MAX_SESSION_KEY_LENGTH,
    agent_key_prefix,
    canonicalize_session_key,
    normalize_agent_id,
    require_session_key,
)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (None, "main"),
        ("", "main"),
        ("   ", "main"),
        ("default", "main"),
        ("DeFaUlT", "main"),
        ("  default  ", "main"),
        ("main", "main"),
        ("Main", "main"),
        ("  Ops  ", "ops"),
        ("research_bot-2", "research_bot-2"),
        ("My Agent!", "my-agent"),
        ("a.b/c", "a-b-c"),
        ("--edge--", "edge"),
        ("!!x!!", "x"),
        ("???", "main"),  # only dashes left: empty, then "default", then "main"
        ("ägent", "gent"),  # a non-ASCII letter is outside [a-z0-9_-]
    ],
)
def test_normalize_agent_id(raw: str | None, expected: str) -> None:
    """Agent ids become lowercase slugs; the absent and default spellings mean ``main``."""
    assert normalize_agent_id(raw) == expected


def test_normalize_agent_id_caps_at_64_characters() -> None:
    """Long agent ids are cut to 64 characters, after the slug is built."""
    assert normalize_agent_id("A" * 100) == "a" * 64
    assert normalize_agent_id("x" * 64) == "x" * 64
    assert normalize_agent_id("b" * 65) == "b" * 64


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("agent:Main:main", "agent:main:main"),
        ("agent:main:main", "agent:main:main"),
        ("  agent:OPS:Thread-A  ", "agent:ops:Thread-A"),
        ("agent:default:x", "agent:main:x"),
        ("agent::x", "agent:main:x"),
        ("agent:My Bot:Chat:Room", "agent:my-bot:Chat:Room"),
        ("webchat:default", "agent:main:webchat:default"),
        ("  webchat:default ", "agent:main:webchat:default"),
        ("webchat:Other", "webchat:Other"),
        ("subagent:agent:Helper:Task", "subagent:agent:helper:Task"),
        ("subagent:agent:X:sub:Y", "subagent:agent:x:sub:Y"),
        ("subagent:other:Thing", "subagent:other:Thing"),
        ("Telegram:Chat:42", "Telegram:Chat:42"),
        ("AGENT:Main:main", "AGENT:Main:main"),  # the `agent:` prefix is case-sensitive
        ("", ""),
        ("   ", ""),
    ],
)
def test_canonicalize_session_key(raw: str, expected: str) -> None:
    """Only the agent segment is normalised; the rest of the key keeps its case."""
    assert canonicalize_session_key(raw) == expected


def test_canonicalize_is_idempotent() -> None:
    """Canonical keys are fixed points, so storing and re-reading never drifts."""
    for raw in ("agent:Main:Main", "webchat:default", "subagent:agent:Q:R", "x:Y"):
        once = canonicalize_session_key(raw)
        assert canonicalize_session_key(once) == once


def test_key_at_the_length_limit_is_accepted_after_trimming() -> None:
    """The limit applies to the trimmed key: surrounding whitespace does not count."""
    key = "k" * MAX_SESSION_KEY_LENGTH
    assert MAX_SESSION_KEY_LENGTH == 512
    assert canonicalize_session_key(f"  {key}  ") == key


@pytest.mark.parametrize(
    "bad",
    [
        "k" * 513,
        "agent:main:" + "x" * 600,
        "agent:main:a\x00b",
        "\x00",
        "agent:main:\ud800",
        "lone\udfff",
    ],
)
def test_refused_keys(bad: str) -> None:
    """Over-long keys, NUL and lone surrogates are refused with a typed error."""
    with pytest.raises(InvalidSessionKeyError):
        canonicalize_session_key(bad)


@pytest.mark.parametrize("bad", [None, 42, b"agent:main:main", ["agent:main:main"]])
def test_non_string_keys_are_refused(bad: Any) -> None:
    """A non-string key is a caller bug; it is an InvalidInputError (also a ValueError)."""
    with pytest.raises(InvalidSessionKeyError) as info:
        canonicalize_session_key(bad)
    assert isinstance(info.value, InvalidInputError)
    assert isinstance(info.value, ValueError)


def test_paired_surrogates_are_fine() -> None:
    """An emoji is a valid code point (not a surrogate pair in Python strings)."""
    assert canonicalize_session_key("agent:main:🦑") == "agent:main:🦑"


def test_require_session_key_refuses_the_empty_key() -> None:
    """Creating a row needs a non-empty key; blank spellings count as empty."""
    assert require_session_key(" agent:Main:x ") == "agent:main:x"
    with pytest.raises(InvalidSessionKeyError):
        require_session_key("   ")


def test_agent_key_prefix_uses_the_normalised_id() -> None:
    """The repair-queue prefix is built from the same normalisation as the keys."""
    assert agent_key_prefix("Ops Team") == "agent:ops-team:"
    assert agent_key_prefix(None) == "agent:main:"
    assert canonicalize_session_key("agent:Ops Team:z").startswith(agent_key_prefix("OPS TEAM"))


def test_a_key_that_grows_past_the_limit_when_canonical_is_refused() -> None:
    """``İ`` lowercases to two characters, so the agent segment can lengthen; the stored
    form must still fit the limit the index bounds rely on."""
    raw = "agent:" + "İ" * 40 + ":" + "x" * (MAX_SESSION_KEY_LENGTH - 47)
    assert len(raw) == MAX_SESSION_KEY_LENGTH
    with pytest.raises(InvalidSessionKeyError, match="once canonical"):
        canonicalize_session_key(raw)
    fitting = "agent:" + "İ" * 40 + ":" + "x" * (MAX_SESSION_KEY_LENGTH - 47 - 24)
    assert len(canonicalize_session_key(fitting)) == MAX_SESSION_KEY_LENGTH


class _Key(str):
    """A ``str`` subclass that could compare or hash like another key: never cached."""


@pytest.mark.parametrize(
    "raw",
    [
        "agent:Main:main",
        " agent:OPS:x ",
        "webchat:default",
        "subagent:agent:A:b",
        "İ" * 300,
        "agent:" + "İ" * 300,
        "a\x00b",
        "x" * (MAX_SESSION_KEY_LENGTH + 1),
        "  " + "y" * MAX_SESSION_KEY_LENGTH + "  ",
        "",
    ],
)
def test_a_remembered_key_gives_what_the_rules_give_every_time(raw: str) -> None:
    """The canonical form of a plain string is remembered; a repeated call gives the same
    string, and a refused key is refused again each time with the same message (a str
    subclass takes the same rules without the cache)."""
    outcomes = []
    for key in (raw, raw, _Key(raw), raw):
        try:
            outcomes.append(("ok", canonicalize_session_key(key)))
        except InvalidSessionKeyError as exc:
            outcomes.append(("refused", str(exc)))
    assert all(outcome == outcomes[0] for outcome in outcomes), outcomes
    if outcomes[0][0] == "ok":
        assert all(type(value) is str for _, value in outcomes)
