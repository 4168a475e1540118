"""What must hold before a session is written by import or copy.

Import and copy write rows exactly as given, ids included, past the manager. So every
value is checked first, the way the public models check what the store's own writers take
(one value domain on both backends: ranges, NOT NULL, NUL in plain text, lengths, finite
numbers; ``docs/semantics.md#values``), plus what a row dict can hold that a model field
cannot see: a missing id, NaN or an unpaired surrogate inside JSON, JSON nested too deeply
to store. Then the sessions are checked against each other (:class:`Claims`) and against
the target (:func:`target_clashes`): a session id names one generation of one session, and
kept ids must be unused.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

from pydantic import ValidationError

from ..db.rows import MODEL_FOR_TABLE
from ..db.tables import CHILD_TABLES, SESSIONS_TABLE
from ..errors import InvalidInputError
from ..models.reports import SessionRows, TableLayout
from .store import TransferStore


def _row_label(table: str, row: dict[str, Any]) -> str:
    return table if table == SESSIONS_TABLE else f"{table} row id {row.get('id')!r}"


def _check_json(name: str, value: Any) -> str | None:
    """Why a JSON column's value cannot be stored, or ``None``."""
    try:
        json.dumps(value, ensure_ascii=False, allow_nan=False).encode("utf-8")
    except RecursionError:
        return f"{name} is nested too deeply to store"
    except UnicodeEncodeError:
        return f"{name} holds an unpaired surrogate, which cannot be stored as UTF-8"
    except (ValueError, TypeError):
        return f"{name} holds NaN or Infinity (or a value that is not JSON)"
    return None


def _check_row(table: str, row: dict[str, Any], layout: TableLayout, key: str) -> None:
    where = f"session {key!r}, {_row_label(table, row)}"
    if table != SESSIONS_TABLE:
        ident = row.get("id")
        if isinstance(ident, bool) or not isinstance(ident, int):
            raise InvalidInputError(f"{where}: the row has no integer id (ids are kept)")
    for name, kind in layout[table]:
        value = row.get(name)
        problem: str | None = None
        if value is None:
            continue
        if kind == "json":
            problem = _check_json(name, value)
        elif kind == "text" and isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                problem = f"{name} holds an unpaired surrogate, which cannot be stored as UTF-8"
        elif kind == "float" and isinstance(value, float) and math.isnan(value):
            problem = f"{name} is NaN, which SQLite cannot store (it would read back as NULL)"
        if problem is not None:
            raise InvalidInputError(f"{where}: {problem}")
    model = MODEL_FOR_TABLE[table]
    try:
        model(**{name: row[name] for name in model.model_fields if name in row})
    except ValidationError as exc:  # models refuse with InvalidInputError; in case one does not
        problems = "; ".join(
            f"{'.'.join(str(part) for part in error['loc'])}: {error['msg']}"
            for error in exc.errors(include_url=False)
        )
        raise InvalidInputError(f"{where}: {problems}") from None
    except (InvalidInputError, ValueError, TypeError) as exc:
        raise InvalidInputError(f"{where}: {exc}") from None


def check_session_values(rows: SessionRows, layout: TableLayout) -> None:
    """Refuse (``InvalidInputError`` naming the session, the row and the column) the first
    value of ``rows`` that either backend would refuse or store as something else."""
    key = rows.session_key
    _check_row(SESSIONS_TABLE, rows.session, layout, key)
    for table in CHILD_TABLES:
        for row in rows.rows(table):
            _check_row(table, row, layout, key)


def generation_ids(rows: SessionRows) -> set[str]:
    """The session ids a session's block carries: its own and its rows' (rows of an older
    generation kept under the key carry that generation's)."""
    found = {rows.session.get("session_id")}
    for table in CHILD_TABLES:
        found.update(row.get("session_id") for row in rows.rows(table))
    return {value for value in found if isinstance(value, str)}


def _summary_slots(rows: SessionRows) -> Iterator[tuple[str, int]]:
    """``(session_id, compaction_index)`` of each summary: unique in the database."""
    for row in rows.rows("session_summaries"):
        session_id, index = row.get("session_id"), row.get("compaction_index", 0)
        if isinstance(session_id, str) and isinstance(index, int):
            yield session_id, index


class Claims:
    """What the sessions admitted so far hold: session ids (a session id names one
    generation of one session), row ids (kept by import and copy) and summary slots
    (``session_id``, ``compaction_index``), each with the key that holds it."""

    def __init__(self, *, track_rows: bool) -> None:
        self._track_rows = track_rows
        self.generations: dict[str, str] = {}
        self.row_ids: dict[str, dict[int, str]] = {table: {} for table in CHILD_TABLES}
        self._slots: dict[tuple[str, int], str] = {}

    def clash(self, rows: SessionRows) -> str | None:
        """Why ``rows`` cannot join the sessions admitted so far, or ``None``."""
        key = rows.session_key
        for session_id in sorted(generation_ids(rows)):
            holder = self.generations.get(session_id)
            if holder is not None and holder != key:
                return (
                    f"session {key!r} carries session id {session_id!r}, which belongs to "
                    f"session {holder!r}; a session id names one generation of one session"
                )
        if not self._track_rows:
            return None
        for table in CHILD_TABLES:
            ids = self.row_ids[table]
            seen: set[int] = set()
            for row in rows.rows(table):
                ident = row["id"]
                if ident in seen or ident in ids:
                    holder = key if ident in seen else ids[ident]
                    return (
                        f"session {key!r}: {table} id {ident} appears twice "
                        f"(also in session {holder!r}); ids are kept, so each must be unique"
                    )
                seen.add(ident)
        mine: set[tuple[str, int]] = set()
        for slot in _summary_slots(rows):
            if slot in mine or slot in self._slots:
                return (
                    f"session {key!r}: two compaction summaries of session id {slot[0]!r} "
                    f"have the compaction_index {slot[1]}"
                )
            mine.add(slot)
        return None

    def claim(self, rows: SessionRows) -> None:
        """Record what ``rows`` holds (after :meth:`clash` found nothing)."""
        key = rows.session_key
        for session_id in generation_ids(rows):
            self.generations.setdefault(session_id, key)
        if not self._track_rows:
            return
        for table in CHILD_TABLES:
            self.row_ids[table].update((row["id"], key) for row in rows.rows(table))
        for slot in _summary_slots(rows):
            self._slots[slot] = key


async def target_clashes(
    store: TransferStore,
    generations: dict[str, str],
    row_ids: dict[str, dict[int, str]],
) -> dict[str, str]:
    """For sessions about to be written (``generations``: session id -> key; ``row_ids``:
    table -> id -> key): key -> why the target cannot take it. A session id another key
    holds there, or a row id already used there (ids are kept)."""
    reasons: dict[str, str] = {}
    if generations:
        holders = await store.generation_holders(list(generations))
        for session_id in sorted(holders):
            key = generations[session_id]
            others = sorted(holders[session_id] - {key})
            if others and key not in reasons:
                reasons[key] = (
                    f"session {key!r} carries session id {session_id!r}, which already "
                    f"belongs to session {others[0]!r} in the target; a session id names one "
                    "generation of one session"
                )
    for table in CHILD_TABLES:
        wanted = row_ids.get(table, {})
        if not wanted:
            continue
        used = await store.row_ids_in_use(table, list(wanted))
        for ident in sorted(used):
            key = wanted[ident]
            if key not in reasons:
                reasons[key] = (
                    f"session {key!r}: {table} id {ident} is already used in the target (by "
                    f"a row stored under {used[ident]!r}); ids are kept, so it cannot be "
                    "written there"
                )
    return reasons
