"""Portable column types and the lossless text codec.

Rules (docs/semantics.md#values):

* timestamps are integer milliseconds (``BigInteger``); ids auto-increment on both
  backends (``INTEGER PRIMARY KEY AUTOINCREMENT`` on SQLite, ``BIGSERIAL`` on Postgres);
* JSON is ``JSON`` with a ``JSONB`` variant on Postgres, SQL ``NULL`` for ``None``;
* floats (in ``Real`` columns and in JSON) have one zero: ``-0.0`` is stored, and read, as
  ``0.0`` on both backends (``jsonb`` and SQLite ``REAL`` cannot keep its sign);
* free text is ``Text`` and round-trips exactly. SQLite stores any valid Unicode string,
  NUL included. PostgreSQL refuses NUL in ``text`` and ``\\u0000`` in ``jsonb``, so on
  Postgres a string holding NUL (or starting with the escape marker) is stored escaped:
  ``MARKER`` followed by the string with ``\\`` doubled and NUL written ``\\0``. Reading
  reverses it. Nothing is dropped or replaced.
* Unpaired surrogates cannot be encoded as UTF-8 at all; they are refused with a clear
  error (the driver's ``UnicodeEncodeError``, translated at the error seam).
"""

from __future__ import annotations

import json
import json.scanner
import re
import uuid
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from sqlalchemy import JSON, BigInteger, Float, Integer, Text
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator, TypeEngine

# U+FDD0 is a Unicode noncharacter, reserved for internal use: it marks an escaped value.
MARKER = "\ufdd0"
_ESCAPED_PIECE = re.compile(r"\\(\\|0)")

IntId: TypeEngine[int] = BigInteger().with_variant(Integer(), "sqlite")
"""Primary keys: a rowid alias with AUTOINCREMENT on SQLite, BIGSERIAL on Postgres."""

Millis = BigInteger
"""Timestamps: integer milliseconds since the Unix epoch (UTC)."""

JSONValue: TypeEngine[Any] = JSON(none_as_null=True).with_variant(
    JSONB(none_as_null=True), "postgresql"
)


def escape_text(value: str) -> str:
    """Make ``value`` storable in Postgres ``text``/``jsonb`` (identity for most strings)."""
    if "\x00" not in value and not value.startswith(MARKER):
        return value
    return MARKER + value.replace("\\", "\\\\").replace("\x00", "\\0")


def unescape_text(value: str) -> str:
    """Reverse :func:`escape_text`."""
    if not value.startswith(MARKER):
        return value
    return _ESCAPED_PIECE.sub(lambda m: "\\" if m.group(1) == "\\" else "\x00", value[1:])


def _walk(value: Any, fn: Callable[[str], str]) -> Any:
    if isinstance(value, str):
        return fn(value)
    if isinstance(value, dict):
        return {fn(k) if isinstance(k, str) else k: _walk(v, fn) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_walk(v, fn) for v in value]
    return value


def without_negative_zero(value: Any) -> Any:
    """``value`` with every float ``-0.0`` made ``0.0`` (the rest as it is; containers are
    copied only along the way to one): the one value domain of both backends. ``jsonb``
    stores numbers as ``numeric``, which has no negative zero, and a SQLite ``REAL`` column
    stores ``-0.0`` as the integer 0; so the store never keeps the sign of a zero, on
    either backend, rather than keep it on one only."""
    if isinstance(value, float):
        return 0.0 if value == 0.0 else value
    if isinstance(value, dict):
        return {name: without_negative_zero(inner) for name, inner in value.items()}
    if isinstance(value, list | tuple):
        return [without_negative_zero(inner) for inner in value]
    return value


def _dumps(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, allow_nan=False)
    if "-0.0" in text:  # rare: a negative zero, or a number such as -0.05
        text = json.dumps(without_negative_zero(value), ensure_ascii=False, allow_nan=False)
    return text


def _dumps_keeping_big_floats(value: Any) -> str:
    """JSON text in which a float of magnitude >= 1e16 keeps a fractional part.

    ``jsonb`` stores numbers as ``numeric`` and prints ``2.5e+16`` back as
    ``25000000000000000``, which reads as an ``int``: the value would come back with another
    type. Written positionally with ``.0`` (the same decimal value, so the same float), it
    reads back as the float it was. Only called when the plain text holds ``e+``.
    """
    token = f"\ufdd1{uuid.uuid4().hex}\ufdd1"
    floats: list[str] = []

    def mark(item: Any) -> Any:
        if isinstance(item, float) and "e+" in repr(item):
            floats.append(format(Decimal(repr(item)), "f") + ".0")
            return f"{token}{len(floats) - 1}"
        if isinstance(item, dict):
            return {key: mark(inner) for key, inner in item.items()}
        if isinstance(item, list | tuple):
            return [mark(inner) for inner in item]
        return item

    text = _dumps(mark(value))
    for index, number in enumerate(floats):
        text = text.replace(f'"{token}{index}"', number, 1)
    return text


def json_serializer(dialect_name: str) -> Callable[[Any], str]:
    """The engine's JSON serializer: strict JSON; NUL-safe on Postgres."""
    if dialect_name != "postgresql":
        return _dumps

    def dumps_pg(value: Any) -> str:
        text = _dumps(value)
        if "\\u0000" in text or MARKER in text:
            value = _walk(value, escape_text)
            text = _dumps(value)
        if "e+" in text:
            text = _dumps_keeping_big_floats(value)
        return text

    return dumps_pg


# The scanner behind ``json.loads`` (C where available), as ``JSONDecoder`` makes its own:
# ``_scan(text, 0)`` is ``JSONDecoder().raw_decode(text)`` without its Python frame; it
# raises ``StopIteration`` where that raises a decode error.
# (typeshed types make_scanner's argument as the C scanner class itself, wrongly.)
_scan: Callable[[str, int], tuple[Any, int]] = json.scanner.make_scanner(
    json.JSONDecoder()  # type: ignore[arg-type]
)


def _loads(text: str | bytes) -> Any:
    """``json.loads(text)``, in one scan for the common case: a ``str`` that is exactly
    one JSON value, which is what our serializer writes. Anything else (bytes, surrounding
    whitespace, trailing data, not JSON at all) goes through ``json.loads`` itself, so the
    result, or the error, is always that of ``json.loads``."""
    if text.__class__ is str:
        try:
            value, end = _scan(text, 0)
        except (StopIteration, ValueError):
            pass
        else:
            if end == len(text):
                return value
    return json.loads(text)


def _zero_signless(decoded: Any, text: str | bytes) -> Any:
    """A decoded JSON value as the store's domain has it (:func:`without_negative_zero`):
    rows written before the rule may hold ``-0.0`` in SQLite's JSON text."""
    marker: Any = "-0.0" if text.__class__ is str else b"-0.0"
    return without_negative_zero(decoded) if marker in text else decoded


def sqlite_json_value(value: Any) -> Any:
    """A SQLite JSON column's stored value, decoded: JSON text (``str`` or ``bytes``) as
    its value, any other stored value as itself (:func:`_loads` inlined: this runs once
    per JSON value a read returns).

    Legacy SQLite rows may hold text that is not JSON; the older store read such a value as
    ``None`` and so do we (the row itself is never modified).
    """
    if value.__class__ is str:
        try:
            decoded, end = _scan(value, 0)
        except (StopIteration, ValueError):
            pass
        else:
            if end == len(value):
                return _zero_signless(decoded, value)
    elif value.__class__ is not bytes:
        return value
    try:
        return _zero_signless(json.loads(value), value)
    except ValueError:
        return None


def json_deserializer(dialect_name: str) -> Callable[[str | bytes], Any]:
    """The engine's JSON deserializer: :func:`sqlite_json_value` on SQLite; on Postgres,
    ``json.loads`` then the NUL escapes reversed."""
    if dialect_name != "postgresql":
        return sqlite_json_value

    def loads_pg(text: str | bytes) -> Any:
        if isinstance(text, bytes):
            text = text.decode("utf-8")
        value = _loads(text)
        if MARKER in text:
            value = _walk(value, unescape_text)
        return value

    return loads_pg


class Real(TypeDecorator[float]):
    """``Float`` in the store's one value domain: ``-0.0`` is written, and read, as
    ``0.0`` (:func:`without_negative_zero`). SQLite's ``REAL`` loses the sign of a zero
    and PostgreSQL's ``double precision`` keeps it; a value must read back the same from
    both, or a copy between them could never verify."""

    impl = Float
    cache_ok = True

    def bind_processor(self, dialect: Dialect) -> Callable[[Any], Any] | None:
        impl = self.impl_instance.dialect_impl(dialect).bind_processor(dialect)
        if impl is None:
            return signless_zero

        def process(value: Any) -> Any:
            return impl(signless_zero(value))

        return process

    def result_processor(self, dialect: Dialect, coltype: object) -> Callable[[Any], Any] | None:
        impl = self.impl_instance.dialect_impl(dialect).result_processor(dialect, coltype)
        if dialect.name != "postgresql":  # a REAL column cannot hold -0.0 there
            return impl
        if impl is None:
            return signless_zero

        def process(value: Any) -> Any:
            return signless_zero(impl(value))

        return process


def signless_zero(value: Any) -> Any:
    """A float column's value in the one domain: ``-0.0`` as ``0.0``."""
    return 0.0 if value.__class__ is float and value == 0.0 else value


class LosslessText(TypeDecorator[str]):
    """``Text`` that stores NUL characters on Postgres too (escaped; see module doc).

    On SQLite it has no bind or result processing at all, so reads stay at driver speed.
    """

    impl = Text
    cache_ok = True

    def bind_processor(self, dialect: Dialect) -> Callable[[Any], Any] | None:
        if dialect.name != "postgresql":
            return None

        def process(value: Any) -> Any:
            return escape_text(value) if isinstance(value, str) else value

        return process

    def result_processor(self, dialect: Dialect, coltype: object) -> Callable[[Any], Any] | None:
        if dialect.name != "postgresql":
            return None

        def process(value: Any) -> Any:
            if value is not None and value.startswith(MARKER):
                return unescape_text(value)
            return value

        return process


def dumps_json_text(value: Any) -> str:
    """A value as the JSON text a :class:`JSONText` column stores: strict JSON (no NaN),
    non-ASCII kept, keys in the caller's order; NUL is written ``\\u0000``, which both
    backends' ``text`` accept."""
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def loads_json_text(value: str | None) -> Any:
    """A :class:`JSONText` column's stored text as its value (``None`` for SQL ``NULL``)."""
    return None if value is None else _loads(value)


class JSONText(TypeDecorator[Any]):
    """JSON kept as *text* on both backends, never ``jsonb``: a value reads back exactly as
    written, object key order and number spelling included (``jsonb`` reorders keys and
    folds numbers). For what the store never queries inside: per-entry ``metadata`` and
    session and scoped state (revision 0009). SQL ``NULL`` for ``None``."""

    impl = Text
    cache_ok = True

    def bind_processor(self, dialect: Dialect) -> Callable[[Any], Any] | None:
        def process(value: Any) -> Any:
            return None if value is None else dumps_json_text(value)

        return process

    def result_processor(self, dialect: Dialect, coltype: object) -> Callable[[Any], Any] | None:
        return loads_json_text
