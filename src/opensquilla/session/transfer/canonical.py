"""Exact comparison of stored values, the same on both backends.

Copy decides "already there" and verifies what it wrote, and import recognises a session an
earlier run imported, by comparing rows across databases that may be of different kinds.
Equality has to be exact: ``1``, ``1.0`` and ``True`` differ, floats by their bits. Only
what the store's value domain does not hold is ignored: the key order of a JSON object
(``jsonb`` does not keep it), except in a column kept as JSON text (per-entry ``metadata``,
``db/types.py`` ``JSONText``), which reads back in the order written on both backends, so
there the order is part of the value; and the sign of a zero (``-0.0`` is stored as ``0.0`` on both
backends, ``db/types.py``; a row written before that rule compares as it would be stored
now). See ``docs/semantics.md#values``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

from ..db.tables import CHILD_TABLES, SESSIONS_TABLE, TABLES
from ..db.types import JSONText
from ..models.reports import ColumnKind, SessionRows, TableLayout

# The columns whose JSON objects keep their key order (stored as JSON text, not jsonb).
KEY_ORDER_COLUMNS = frozenset(
    column.name for table in TABLES for column in table.columns if isinstance(column.type, JSONText)
)


class _Raw(str):
    """Output text queued on the canonical encoder's stack (not a value to encode)."""


def _canonical_text(value: Any, *, key_order: bool = False) -> str:
    """``value`` as text that is equal for two values exactly when they are the same value
    of the same type: ``1``, ``1.0`` and ``True`` differ, floats are compared bit for bit
    in the store's domain (``0.1 + 0.2`` is not ``0.3``; ``-0.0`` is ``0.0``, the one zero
    both backends store), strings character for character
    (a NUL is not its escaped spelling). Object keys are sorted: ``jsonb`` does not keep
    their order, so it is no part of a stored value; each key stays with its own value.
    ``key_order``: the value of a :data:`KEY_ORDER_COLUMNS` column, whose keys are kept in
    their order (two objects differing only in it differ).

    Iterative, so the deepest JSON the store accepts is encoded like any other. The form
    is self-delimiting (``n``, ``T``, ``F``, ``i<digits>;``, ``f<hex>;``, a JSON string
    literal after ``s``, ``[...]``, ``{...}``), so no two values share a spelling.
    """
    out: list[str] = []
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        if type(item) is _Raw:
            out.append(item)
        elif item is None:
            out.append("n")
        elif item is True or item is False:
            out.append("T" if item else "F")
        elif isinstance(item, int):
            out.append(f"i{int(item)};")
        elif isinstance(item, float):
            out.append(f"f{(item + 0.0).hex()};")  # -0.0 + 0.0 is 0.0: one zero
        elif isinstance(item, str):
            out.append("s" + json.dumps(str(item)))
        elif isinstance(item, dict):
            out.append("{")
            stack.append(_Raw("}"))
            names = list(item)[::-1] if key_order else sorted(item, key=str, reverse=True)
            for name in names:
                stack.append(item[name])
                stack.append(_Raw("s" + json.dumps(str(name))))
        elif isinstance(item, list | tuple):
            out.append("[")
            stack.append(_Raw("]"))
            stack.extend(reversed(item))
        else:
            out.append(f"?{type(item).__name__}:{item!r};")
    return "".join(out)


def _column_value(value: Any, kind: ColumnKind) -> Any:
    """A float column's value as the float it is: a legacy SQLite column of another
    affinity may give ``1`` where a REAL column gives ``1.0``; both are the stored float
    1.0. Nothing else is converted."""
    if kind == "float" and isinstance(value, int) and not isinstance(value, bool):
        try:
            number = float(value)
        except OverflowError:
            return value
        return number if int(number) == value else value
    return value


def canonical_row(row: dict[str, Any], columns: Sequence[tuple[str, ColumnKind]]) -> bytes:
    """One row in a form that is equal across backends exactly when the rows hold the same
    values (:func:`_canonical_text`): for checksums and "already copied" checks, not for
    files. A column the row does not carry reads as SQL ``NULL``."""
    text = "".join(
        _canonical_text(_column_value(row.get(name), kind), key_order=name in KEY_ORDER_COLUMNS)
        for name, kind in columns
    )
    return text.encode("ascii") + b"\n"


def session_digest(rows: SessionRows, layout: TableLayout) -> str:
    """A digest of everything a session holds, comparable across backends."""
    digest = hashlib.sha256()
    digest.update(canonical_row(rows.session, layout[SESSIONS_TABLE]))
    for table in CHILD_TABLES:
        digest.update(f"{table}\n".encode())
        for row in rows.rows(table):
            digest.update(canonical_row(row, layout[table]))
    return digest.hexdigest()
