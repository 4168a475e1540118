"""The export format, version 1: its records, its lines and how values are written.

The format is JSON Lines: UTF-8, one JSON object per line, lines ended by ``\\n`` (a
``\\n`` inside a value is always escaped by JSON, so a line is always one object). Every
object has a ``kind``:

``header`` (first line)
    ``{"kind": "header", "format": "opensquilla-session-export", "version": 1,
    "tables": {table: [[column, kind], ...]}}``: the columns each row object carries, in
    table order, with the kind of value each holds (``text``, ``int``, ``float``, ``bool``,
    ``json``).
``session``
    ``{"kind": "session", "row": {column: value}}``: one ``sessions`` row; the session's
    block starts here.
``row``
    ``{"kind": "row", "table": name, "row": {column: value}}``: a row the session owns, from
    ``transcript_entries``, ``compacted_transcript_entries``, ``session_summaries`` or
    ``session_context_states`` (in that order, each in ``id`` order; ids are kept). A row
    belongs to the session whose key is its ``session_key``: every generation's context
    states, and any row of an older generation still stored under the key.
``end``
    ``{"kind": "end", "session_key": key, "rows": {table: count}, "sha256": hex}``: closes
    the block; ``sha256`` is the digest of the block's ``session`` and ``row`` lines, bytes
    as written, newlines included (delete the field to import a hand-edited block).
``footer`` (last line)
    ``{"kind": "footer", "sessions": n, "rows": {table: count}}``: the file is complete.

Values are the column values as JSON: text as strings (NUL and every other character kept;
nothing is truncated; characters a terminal would act on are written as ``\\u`` escapes),
integers as integers, ``float`` columns as numbers (``"NaN"``, ``"Infinity"`` and
``"-Infinity"`` as strings), ``json`` columns as the JSON value itself, SQL ``NULL`` as
``null``. Sessions appear in code-point order of their keys, so exporting,
importing into an empty database and exporting again gives the same bytes.

An importer refuses a file whose version is newer than it knows, a column it does not know,
and any block that is incomplete or does not match its ``end`` line; a bare ``NaN`` or
``Infinity`` token (not JSON) too.

The records are pydantic models in a union told apart by ``kind``; their fields take any
JSON value. What each field must hold is checked by the reader, because the check depends
on where the line is (the header's columns, the open block) and the refusals name the
first problem in the order the reader meets it.
"""

from __future__ import annotations

import json
import math
import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from ..models.reports import ColumnKind
from .errors import ExportFormatError

FORMAT_NAME = "opensquilla-session-export"
FORMAT_VERSION = 1
_NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


# -- records ---------------------------------------------------------------------------


class _Record(BaseModel):
    """One line's object. Fields are written in the order they are declared; an object may
    carry fields a record does not name (they are ignored), and a field it lacks reads as
    ``None``."""

    model_config = ConfigDict(frozen=True)

    def document(self) -> dict[str, Any]:
        """The object the record's line holds."""
        return {name: getattr(self, name) for name in type(self).model_fields}


class HeaderRecord(_Record):
    kind: Literal["header"] = "header"
    format: Any = None
    version: Any = None
    tables: Any = None


class SessionRecord(_Record):
    kind: Literal["session"] = "session"
    row: Any = None


class RowRecord(_Record):
    kind: Literal["row"] = "row"
    table: Any = None
    row: Any = None


class EndRecord(_Record):
    kind: Literal["end"] = "end"
    session_key: Any = None
    rows: Any = None
    sha256: Any = None


class FooterRecord(_Record):
    kind: Literal["footer"] = "footer"
    sessions: Any = None
    rows: Any = None


Record = HeaderRecord | SessionRecord | RowRecord | EndRecord | FooterRecord
_RECORD: TypeAdapter[Record] = TypeAdapter(Annotated[Record, Field(discriminator="kind")])


def parse_record(document: dict[str, Any]) -> Record | None:
    """The record a line's object is, or ``None`` when its ``kind`` (a string) names no
    record: the fields take any value, so the kind is the only thing that can fail."""
    try:
        return _RECORD.validate_python(document)
    except ValidationError:
        return None


# -- lines -----------------------------------------------------------------------------


# Characters JSON may leave raw that a terminal acts on (an export goes to stdout by
# default): DEL, C1 controls such as the 8-bit CSI, line separators, bidi overrides. They
# are written as \u escapes, the same string to any JSON reader.
_TERMINAL_UNSAFE = re.compile("[\x7f-\x9f\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def encode_line(record: Record) -> bytes:
    """The record's line, ``\\n`` included."""
    text = json.dumps(record.document(), ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    text = _TERMINAL_UNSAFE.sub(lambda match: f"\\u{ord(match.group()):04x}", text)
    return text.encode("utf-8") + b"\n"


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"bare {name} is not JSON (the format writes it as the string {name!r})")


def decode_line(raw: bytes) -> Any:
    """The JSON value of one line. Raises ``ValueError`` (``UnicodeDecodeError`` included)
    for what is not JSON, a bare ``NaN`` or ``Infinity`` too, and ``RecursionError`` for a
    value nested too deeply to read."""
    return json.loads(raw, parse_constant=_refuse_constant)


# -- values ----------------------------------------------------------------------------


def encode_value(value: Any, kind: ColumnKind, where: str) -> Any:
    """A column value as it goes into the file (see the module doc)."""
    if value is None or kind == "json":
        return value
    if kind == "text" and isinstance(value, str):
        return value
    if kind == "int" and isinstance(value, int) and not isinstance(value, bool):
        return value
    if kind == "bool" and isinstance(value, bool | int):
        return bool(value)
    if kind == "float" and isinstance(value, int | float) and not isinstance(value, bool):
        number = float(value)
        if math.isfinite(number):
            return number
        return "NaN" if math.isnan(number) else ("Infinity" if number > 0 else "-Infinity")
    raise ExportFormatError(
        f"{where} holds a {type(value).__name__} value where a {kind} value belongs; "
        "the export format cannot carry it"
    )


def decode_value(value: Any, kind: ColumnKind, where: str) -> Any:
    """A column value read from the file, checked against its kind."""
    if value is None or kind == "json":
        return value
    ok = (
        (kind == "text" and isinstance(value, str))
        or (kind == "int" and isinstance(value, int) and not isinstance(value, bool))
        or (kind == "bool" and isinstance(value, bool))
    )
    if ok:
        return value
    if kind == "float":
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str) and value in _NON_FINITE:
            return _NON_FINITE[value]
    raise ExportFormatError(f"{where}: {value!r} is not a valid {kind} value")
