"""The lossless text codec (``db/types.py``).

PostgreSQL refuses NUL in ``text`` and ``\\u0000`` in ``jsonb``; the codec must still give
back every string exactly, and must leave ordinary strings untouched so that existing
rows and SQL comparisons keep working.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from opensquilla.session.db.types import (
    MARKER,
    escape_text,
    json_deserializer,
    json_serializer,
    unescape_text,
    without_negative_zero,
)

# Text biased towards the characters the codec cares about, plus anything else.
tricky_text = st.text(
    alphabet=st.one_of(
        st.sampled_from(["\x00", "\\", "0", MARKER, "a", "é", "🦑"]),
        st.characters(codec="utf-8"),
    )
)

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**53), max_value=2**53),
    st.floats(allow_nan=False, allow_infinity=False),
    tricky_text,
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(tricky_text, inner, max_size=4),
    ),
    max_leaves=20,
)


@given(tricky_text)
def test_escape_round_trips(value: str) -> None:
    """Whatever goes in comes back out, character for character."""
    assert unescape_text(escape_text(value)) == value


@given(tricky_text)
def test_escaped_text_holds_no_nul(value: str) -> None:
    """The escaped form is always storable in a Postgres ``text`` column."""
    assert "\x00" not in escape_text(value)


@given(tricky_text)
def test_plain_strings_are_left_alone(value: str) -> None:
    """Strings without NUL that do not start with the marker are stored as they are."""
    if "\x00" in value or value.startswith(MARKER):
        assert escape_text(value).startswith(MARKER)
    else:
        assert escape_text(value) == value


@given(tricky_text, tricky_text)
def test_escape_is_injective(a: str, b: str) -> None:
    """Two different strings never share an escaped form (no silent merging)."""
    if a != b:
        assert escape_text(a) != escape_text(b)


@pytest.mark.parametrize(
    ("raw", "escaped"),
    [
        ("a\x00b", MARKER + "a\\0b"),
        ("\\0", "\\0"),  # no NUL, no marker: unchanged
        ("\x00\\0", MARKER + "\\0\\\\0"),
        (MARKER, MARKER + MARKER),
        (MARKER + "x\\", MARKER + MARKER + "x\\\\"),
        ("x" + MARKER, "x" + MARKER),
    ],
)
def test_escape_examples(raw: str, escaped: str) -> None:
    """The stored form is pinned: rows written by one version are read by the next."""
    assert escape_text(raw) == escaped
    assert unescape_text(escaped) == raw


def _strings_in(document: Any) -> Iterator[str]:
    """Every string of a parsed JSON document, keys included."""
    if isinstance(document, str):
        yield document
    elif isinstance(document, list):
        for item in document:
            yield from _strings_in(item)
    elif isinstance(document, dict):
        for key, item in document.items():
            yield key
            yield from _strings_in(item)


@given(json_values)
def test_postgres_json_round_trips(value: Any) -> None:
    """JSON with NUL or the marker in keys and values survives the Postgres codec, and
    the text handed to Postgres is a document ``jsonb`` accepts: no raw NUL in the text,
    and no string that decodes to one (``jsonb`` refuses the ``\\u0000`` escape). The
    check parses the text rather than searching it, so a literal backslash followed by
    ``u0000`` in a key or value (which JSON writes as ``\\\\u0000``) is not mistaken for it."""
    dumps = json_serializer("postgresql")
    loads = json_deserializer("postgresql")
    text = dumps(value)
    assert "\x00" not in text
    assert not any("\x00" in string for string in _strings_in(json.loads(text)))
    assert loads(text) == value


@pytest.mark.parametrize(
    "value",
    [{"\\u0000": "\\u0000"}, ["\\\\u0000", "a\\u0000b"], "\\u0000\x00"],
)
def test_postgres_json_keeps_literal_backslash_u_sequences(value: Any) -> None:
    """The example hypothesis once found: a literal ``\\u0000`` (six characters) is text
    like any other and round-trips unchanged."""
    text = json_serializer("postgresql")(value)
    assert "\x00" not in text
    assert not any("\x00" in string for string in _strings_in(json.loads(text)))
    assert json_deserializer("postgresql")(text) == value


@given(json_values)
def test_sqlite_json_round_trips(value: Any) -> None:
    """SQLite stores the JSON text as is; NUL is escaped by JSON itself."""
    dumps = json_serializer("sqlite")
    loads = json_deserializer("sqlite")
    assert loads(dumps(value)) == value


def test_postgres_json_keeps_plain_documents_unchanged() -> None:
    """Escaping only kicks in when needed, so ordinary JSON stays readable in SQL."""
    value = {"a": [1, "b", None], "c": {"d": "é"}}
    assert json.loads(json_serializer("postgresql")(value)) == value


def test_postgres_json_escapes_nul_in_keys_and_values() -> None:
    dumps = json_serializer("postgresql")
    text = dumps({"k\x00": ["v\x00", MARKER + "m"]})
    assert json.loads(text) == {MARKER + "k\\0": [MARKER + "v\\0", MARKER + MARKER + "m"]}
    assert json_deserializer("postgresql")(text) == {"k\x00": ["v\x00", MARKER + "m"]}


@pytest.mark.parametrize("dialect", ["postgresql", "sqlite"])
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_json_refuses_non_finite_floats(dialect: str, bad: float) -> None:
    """NaN and infinities are not JSON; storing them would produce unreadable rows."""
    with pytest.raises(ValueError):
        json_serializer(dialect)({"x": [bad]})


@pytest.mark.parametrize("dialect", ["postgresql", "sqlite"])
def test_json_refuses_unserialisable_objects(dialect: str) -> None:
    with pytest.raises(TypeError):
        json_serializer(dialect)({"x": object()})


def test_sqlite_reads_invalid_legacy_json_as_none() -> None:
    """The older store read non-JSON text as None; legacy rows must stay readable."""
    assert json_deserializer("sqlite")("not json {") is None
    assert json_deserializer("sqlite")('{"ok": 1}') == {"ok": 1}


@pytest.mark.parametrize("number", [2.5e16, 1e300, -3e20, 1.7976931348623157e308, 5e-324])
def test_postgres_json_writes_big_floats_with_a_fraction(number: float) -> None:
    """``jsonb`` prints ``2.5e+16`` back as ``25000000000000000`` (an int once read); the
    codec writes it positionally with ``.0`` so it reads back as the same float."""
    text = json_serializer("postgresql")({"n": [number], "s": "e+"})
    assert "e+" not in text.replace('"e+"', "")
    back = json_deserializer("postgresql")(text)
    assert back == {"n": [number], "s": "e+"}
    assert type(back["n"][0]) is float


def _json_or_none(text: str | bytes) -> Any:
    """``json.loads`` in the store's value domain (one zero: ``-0.0`` reads as ``0.0``)."""
    try:
        return without_negative_zero(json.loads(text))
    except ValueError:
        return None


@given(
    st.one_of(
        st.text(max_size=30),
        json_values.map(json.dumps),
        st.tuples(st.sampled_from(["", " ", "\n", "\ufeff"]), json_values.map(json.dumps))
        .map("".join)
        .flatmap(lambda text: st.sampled_from([text, text + " ", text + "x", text + "1"])),
    )
)
@example("[-0.0, 1]")  # one zero: read as [0.0, 1] on SQLite
def test_sqlite_json_decoding_is_json_loads(text: str) -> None:
    """The read path calls the scanner directly; what it returns is ``json.loads``'s
    (``None`` where that raises), for JSON text with leading or trailing whitespace,
    trailing data, a byte-order mark, or no JSON at all."""
    expected = _json_or_none(text)
    assert repr(json_deserializer("sqlite")(text)) == repr(expected)
    as_bytes = text.encode("utf-8")
    assert repr(json_deserializer("sqlite")(as_bytes)) == repr(_json_or_none(as_bytes))
    if expected is not None:  # jsonb never hands back a -0.0: plain json.loads there
        assert repr(json_deserializer("postgresql")(text)) == repr(json.loads(text))
