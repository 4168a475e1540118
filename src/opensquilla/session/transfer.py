"""Moving whole sessions: export to a file, import from one, copy between two databases.

The export format (version 1) is JSON Lines: UTF-8, one JSON object per line, lines ended by
``\\n`` (a ``\\n`` inside a value is always escaped by JSON, so a line is always one object).
Every object has a ``kind``:

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
``Infinity`` token (not JSON) too. The whole file is checked before anything is written,
every value included: the public models' domain (the same on both backends), session ids
that belong to one session only, row ids unused in the target. Each session is imported in
one transaction; a session already in the target with exactly the file's contents is
recognised, so running an interrupted import again finishes it.

Copy checks each session the same way before writing it and compares values exactly
(:func:`canonical_row`): ``1``, ``1.0`` and ``True`` differ, floats by their bits.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import math
import os
import re
import stat
import uuid
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, TypeVar

from pydantic import BaseModel, ValidationError

from .errors import (
    DatabaseUnavailableError,
    InvalidInputError,
    SessionExistsError,
    SessionNotFoundError,
    SessionStoreError,
)
from .keys import canonicalize_session_key
from .models import (
    CompactedTranscriptEntry,
    SessionContextState,
    SessionNode,
    SessionSummary,
    TranscriptEntry,
)
from .operations import (
    ALL_TABLES,
    CHILD_TABLES,
    SESSIONS_TABLE,
    ColumnKind,
    IfExists,
    SessionRows,
    TableLayout,
)
from .storage import SessionStorage

log = logging.getLogger(__name__)
T = TypeVar("T")

FORMAT_NAME = "opensquilla-session-export"
FORMAT_VERSION = 1
DEFAULT_BATCH = 100
DEFAULT_JOBS = 4
_NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


class ExportFormatError(SessionStoreError, ValueError):
    """A file that is not a complete, valid export this version can read, or a value the
    export format cannot carry."""


class TransferError(SessionStoreError):
    """A session could not be moved to the target (nothing of that session was written)."""


# -- values ----------------------------------------------------------------------------


def _encode(value: Any, kind: ColumnKind, where: str) -> Any:
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


def _decode(value: Any, kind: ColumnKind, where: str) -> Any:
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


class _Raw(str):
    """Output text queued on the canonical encoder's stack (not a value to encode)."""


def _canonical_text(value: Any) -> str:
    """``value`` as text that is equal for two values exactly when they are the same value
    of the same type: ``1``, ``1.0`` and ``True`` differ, floats are compared bit for bit
    (``-0.0`` is not ``0.0``; ``0.1 + 0.2`` is not ``0.3``), strings character for character
    (a NUL is not its escaped spelling). Object keys are sorted: ``jsonb`` does not keep
    their order, so it is no part of a stored value; each key stays with its own value.

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
            out.append(f"f{item.hex()};")
        elif isinstance(item, str):
            out.append("s" + json.dumps(str(item)))
        elif isinstance(item, dict):
            out.append("{")
            stack.append(_Raw("}"))
            for name in sorted(item, key=str, reverse=True):
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
    text = "".join(_canonical_text(_column_value(row.get(name), kind)) for name, kind in columns)
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


def _batches(items: Sequence[str], size: int) -> Iterator[list[str]]:
    for start in range(0, len(items), max(1, size)):
        yield list(items[start : start + max(1, size)])


def _ordered(keys: Sequence[str]) -> list[str]:
    """Keys in code-point order (the same on every backend, whatever its collation)."""
    return sorted(set(keys))


# -- checking values -------------------------------------------------------------------
#
# Import and copy write rows exactly as given, ids included, past the manager. So every
# value is checked first, the way the public models check what the store's own writers
# take (one value domain on both backends: ranges, NOT NULL, NUL in plain text, lengths,
# finite numbers), plus what a row dict can hold that a model field cannot see: a missing
# id, NaN or an unpaired surrogate inside JSON, JSON nested too deeply to store.

_RECORDS: dict[str, type[BaseModel]] = {
    SESSIONS_TABLE: SessionNode,
    "transcript_entries": TranscriptEntry,
    "compacted_transcript_entries": CompactedTranscriptEntry,
    "session_summaries": SessionSummary,
    "session_context_states": SessionContextState,
}


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
    model = _RECORDS[table]
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


class _Claims:
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
        key = rows.session_key
        for session_id in generation_ids(rows):
            self.generations.setdefault(session_id, key)
        if not self._track_rows:
            return
        for table in CHILD_TABLES:
            self.row_ids[table].update((row["id"], key) for row in rows.rows(table))
        for slot in _summary_slots(rows):
            self._slots[slot] = key


async def _target_clashes(
    storage: SessionStorage,
    generations: dict[str, str],
    row_ids: dict[str, dict[int, str]],
) -> dict[str, str]:
    """For sessions about to be written (``generations``: session id -> key; ``row_ids``:
    table -> id -> key): key -> why the target cannot take it. A session id another key
    holds there, or a row id already used there (ids are kept)."""
    reasons: dict[str, str] = {}
    if generations:
        holders = await storage.generation_holders(list(generations))
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
        used = await storage.row_ids_in_use(table, list(wanted))
        for ident in sorted(used):
            key = wanted[ident]
            if key not in reasons:
                reasons[key] = (
                    f"session {key!r}: {table} id {ident} is already used in the target (by "
                    f"a row stored under {used[ident]!r}); ids are kept, so it cannot be "
                    "written there"
                )
    return reasons


# -- export ----------------------------------------------------------------------------


# Characters JSON may leave raw that a terminal acts on (an export goes to stdout by
# default): DEL, C1 controls such as the 8-bit CSI, line separators, bidi overrides. They
# are written as \u escapes, the same string to any JSON reader.
_TERMINAL_UNSAFE = re.compile("[\x7f-\x9f\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _line(document: dict[str, Any]) -> bytes:
    text = json.dumps(document, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    text = _TERMINAL_UNSAFE.sub(lambda match: f"\\u{ord(match.group()):04x}", text)
    return text.encode("utf-8") + b"\n"


@dataclass
class ExportSummary:
    sessions: int = 0
    rows: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ALL_TABLES, 0))
    bytes_written: int = 0


class ExportWriter:
    """Writes the export format to a binary stream, one session block at a time."""

    def __init__(self, out: IO[bytes], layout: TableLayout) -> None:
        self._out = out
        self._layout = layout
        self.summary = ExportSummary()

    def _write(self, data: bytes) -> None:
        self._out.write(data)
        self.summary.bytes_written += len(data)

    def header(self) -> None:
        tables = {table: [list(column) for column in self._layout[table]] for table in ALL_TABLES}
        self._write(
            _line(
                {
                    "kind": "header",
                    "format": FORMAT_NAME,
                    "version": FORMAT_VERSION,
                    "tables": tables,
                }
            )
        )

    def _row(self, table: str, row: dict[str, Any], key: str) -> dict[str, Any]:
        return {
            name: _encode(row[name], kind, f"{table}.{name} (session {key!r})")
            for name, kind in self._layout[table]
        }

    def session(self, rows: SessionRows) -> None:
        key = rows.session_key
        block = [_line({"kind": "session", "row": self._row(SESSIONS_TABLE, rows.session, key)})]
        for table in CHILD_TABLES:
            for row in rows.rows(table):
                block.append(
                    _line({"kind": "row", "table": table, "row": self._row(table, row, key)})
                )
        digest = hashlib.sha256()
        for line in block:
            digest.update(line)
            self._write(line)
        counts = rows.row_counts()
        end = {"kind": "end", "session_key": key, "rows": counts, "sha256": digest.hexdigest()}
        self._write(_line(end))
        self.summary.sessions += 1
        self.summary.rows[SESSIONS_TABLE] += 1
        for table, n in counts.items():
            self.summary.rows[table] += n

    def footer(self) -> None:
        self._write(
            _line(
                {
                    "kind": "footer",
                    "sessions": self.summary.sessions,
                    "rows": dict(self.summary.rows),
                }
            )
        )


async def export_sessions(
    storage: SessionStorage,
    out: IO[bytes],
    *,
    session_keys: Sequence[str] | None = None,
    batch_size: int = DEFAULT_BATCH,
) -> ExportSummary:
    """Write every session (or the named ones) to ``out`` in the export format.

    Each batch of sessions is read from one snapshot. Named sessions that do not exist are
    refused (``SessionNotFoundError``) before anything is written.
    """
    layout = storage.table_layout()
    writer = ExportWriter(out, layout)
    if session_keys is None:
        keys = _ordered(await storage.list_session_keys())
    else:
        # A key as stored first (legacy keys need not be canonical), else its canonical form.
        given = list(session_keys)
        found = await storage.existing_session_keys(given)
        keys = _ordered([key if key in found else canonicalize_session_key(key) for key in given])
        missing = sorted(set(keys) - found - await storage.existing_session_keys(keys))
        if missing:
            raise SessionNotFoundError(f"Session not found: {', '.join(missing[:5])}")
    writer.header()
    for batch in _batches(keys, batch_size):
        for rows in await storage.read_session_rows(batch):
            writer.session(rows)
            log.debug(
                "exported %s",
                rows.session_key,
                extra={"session_key": rows.session_key, "operation": "export"},
            )
    writer.footer()
    return writer.summary


_SQLITE_MAGIC = b"SQLite format 3\x00"
_STORE_FILE_SUFFIXES = ("", "-wal", "-shm", "-journal")
# Paths that name one of this process's open descriptors: written through a duplicate of
# the descriptor, so a redirect's offset and append mode are kept (reopening
# /proc/self/fd/1 would truncate a file the shell opened with >>).
_DESCRIPTOR_ALIASES = {"/dev/stdin": 0, "/dev/stdout": 1, "/dev/stderr": 2}
_DESCRIPTOR_PREFIXES = ("/dev/fd/", "/proc/self/fd/")
_SYSTEM_DIRECTORIES = ("/dev/", "/proc/", "/sys/")


def _descriptor_alias(path: Path) -> int | None:
    text = str(path)
    if text in _DESCRIPTOR_ALIASES:
        return _DESCRIPTOR_ALIASES[text]
    for prefix in _DESCRIPTOR_PREFIXES:
        if text.startswith(prefix) and text[len(prefix) :].isdigit():
            return int(text[len(prefix) :])
    return None


def _refuse_store_files(destination: Path, database: Path | None) -> None:
    """Refuse a destination that is the store's own database or one of its companion files
    (``-wal``, ``-shm``, ``-journal``), by name through symlinks or by inode (a hard link):
    replacing it with an export would destroy the store."""
    if database is None:
        return
    real = os.path.realpath(destination)
    try:
        given = os.stat(destination)
    except OSError:
        given = None
    for suffix in _STORE_FILE_SUFFIXES:
        own = database.with_name(database.name + suffix)
        same = real == os.path.realpath(own)
        if not same and given is not None:
            try:
                found = os.stat(own)
            except OSError:
                continue
            same = (found.st_dev, found.st_ino) == (given.st_dev, given.st_ino)
        if same:
            raise InvalidInputError(
                f"refusing to export to {destination}: it is this store's own database file "
                f"{own}; write the export somewhere else"
            )


def _is_sqlite_database(path: str) -> bool:
    try:
        with open(path, "rb") as stream:
            return stream.read(len(_SQLITE_MAGIC)) == _SQLITE_MAGIC
    except OSError:
        return False


def _destination_kind(destination: Path) -> str:
    """``"stream"`` (write straight through: a FIFO, a character device such as /dev/null,
    a descriptor alias such as /dev/stdout) or ``"file"`` (a regular file, new or not:
    written to a temporary file and renamed into place). Anything else is refused."""
    if _descriptor_alias(destination) is not None:
        return "stream"
    try:
        found = os.stat(destination)  # through symlinks: what the data would land in
    except FileNotFoundError:
        return "file"
    mode = found.st_mode
    if stat.S_ISFIFO(mode) or stat.S_ISCHR(mode):
        return "stream"
    if os.path.realpath(destination).startswith(_SYSTEM_DIRECTORIES) and stat.S_ISREG(mode):
        # Never create or rename files among the system's devices, whatever is there.
        return "stream"
    if stat.S_ISDIR(mode):
        raise InvalidInputError(f"cannot export to {destination}: it is a directory")
    if not stat.S_ISREG(mode):
        kind = "a block device" if stat.S_ISBLK(mode) else "not a regular file, FIFO or device"
        raise InvalidInputError(f"refusing to export to {destination}: it is {kind}")
    if _is_sqlite_database(str(destination)):
        raise InvalidInputError(
            f"refusing to export to {destination}: it is a SQLite database, which an export "
            "would destroy; write the export somewhere else"
        )
    return "file"


def _open_stream(destination: Path) -> IO[bytes]:
    """The destination opened for writing as it is: no temporary file, no rename; a
    descriptor's file keeps its offset and append mode (a FIFO open waits for its
    reader)."""
    alias = _descriptor_alias(destination)
    if alias is not None:
        return os.fdopen(os.dup(alias), "wb")
    # O_TRUNC does nothing to a FIFO or a device; it empties a regular file among /dev.
    return os.fdopen(os.open(destination, os.O_WRONLY | os.O_TRUNC), "wb")


def _prepare(path: Path | str, database: Path | None) -> tuple[str, Path]:
    """``(kind, where to write)``: the destination checked (:func:`_refuse_store_files`,
    :func:`_destination_kind`); a file's path resolved through symlinks, so that a symlink
    to it stays a symlink."""
    destination = Path(path).expanduser()
    _refuse_store_files(destination, database)
    kind = _destination_kind(destination)
    return kind, destination if kind == "stream" else Path(os.path.realpath(destination))


async def export_to_file(
    storage: SessionStorage,
    path: Path | str,
    *,
    session_keys: Sequence[str] | None = None,
    batch_size: int = DEFAULT_BATCH,
) -> ExportSummary:
    """Export to ``path`` without ever destroying what is there.

    The store's own files (its database, ``-wal``, ``-shm``, ``-journal``, however they are
    reached) and any other SQLite database are refused, as are directories and block
    devices. A FIFO, a character device (``/dev/null``) or a descriptor (``/dev/stdout``)
    is written straight through. A regular file is written owner-only (0600) to a
    temporary file beside it and renamed into place, so it never holds half an export; a
    symlink to one stays a symlink (the file it points to is replaced).
    """
    kind, destination = await asyncio.to_thread(_prepare, path, storage.target.path)
    if kind == "stream":
        out = await asyncio.to_thread(_open_stream, destination)
        with out:
            summary = await export_sessions(
                storage, out, session_keys=session_keys, batch_size=batch_size
            )
            out.flush()
        return summary
    final = destination
    temporary = final.with_name(f".{final.name}.{uuid.uuid4().hex}.tmp")
    fd = os.open(temporary, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    try:
        with os.fdopen(fd, "wb") as out:
            summary = await export_sessions(
                storage, out, session_keys=session_keys, batch_size=batch_size
            )
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, final)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
    return summary


# -- reading an export -----------------------------------------------------------------


@dataclass
class ExportFileInfo:
    """What a checked export file holds: its keys and row counts, and for each session what
    the import needs to check against the target before writing anything."""

    version: int
    session_keys: list[str]
    rows: dict[str, int]
    # key -> digest of the session over the columns the file describes (an earlier import
    # of the same block reads back with the same digest).
    digests: dict[str, str] = field(default_factory=dict)
    # key -> SHA-256 of the block's lines: the writing pass must read the same blocks.
    blocks: dict[str, str] = field(default_factory=dict)
    generations: dict[str, str] = field(default_factory=dict)  # session id -> key
    row_ids: dict[str, dict[int, str]] = field(default_factory=dict)  # table -> id -> key


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"bare {name} is not JSON (the format writes it as the string {name!r})")


class ExportReader:
    """Reads and checks an export file; :meth:`sessions` yields each block, decoded."""

    def __init__(self, path: Path | str, layout: TableLayout) -> None:
        self.path = Path(path).expanduser()
        self._layout = layout
        self._columns: dict[str, dict[str, ColumnKind]] = {}
        self.block_hashes: dict[str, str] = {}

    @property
    def file_layout(self) -> TableLayout:
        """The columns the file describes (after the header is read): a file may describe
        fewer than this version has."""
        return {table: tuple(columns.items()) for table, columns in self._columns.items()}

    def _fail(self, number: int, message: str) -> ExportFormatError:
        return ExportFormatError(f"{self.path}, line {number}: {message}")

    def _lines(self) -> Iterator[tuple[int, bytes, dict[str, Any]]]:
        with open(self.path, "rb") as stream:
            for number, raw in enumerate(stream, start=1):
                if not raw.endswith(b"\n"):
                    raise self._fail(number, "the file ends in the middle of a line (truncated)")
                try:
                    document = json.loads(raw, parse_constant=_refuse_constant)
                except RecursionError:
                    raise self._fail(number, "a value is nested too deeply to read") from None
                except (UnicodeDecodeError, ValueError) as exc:
                    raise self._fail(number, f"not a JSON object ({exc})") from None
                if not isinstance(document, dict) or not isinstance(document.get("kind"), str):
                    raise self._fail(number, "not an export record (no 'kind')")
                yield number, raw, document

    def _read_header(self, number: int, document: dict[str, Any]) -> int:
        if document.get("kind") != "header" or document.get("format") != FORMAT_NAME:
            raise self._fail(number, f"not an {FORMAT_NAME} file (no header line)")
        version = document.get("version")
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise self._fail(number, f"invalid format version {version!r}")
        if version > FORMAT_VERSION:
            raise ExportFormatError(
                f"{self.path} uses export format version {version}, which is newer than this "
                f"opensquilla-session understands (version {FORMAT_VERSION}); "
                "upgrade opensquilla-session to import it"
            )
        tables = document.get("tables")
        if not isinstance(tables, dict) or set(tables) != set(ALL_TABLES):
            raise self._fail(number, f"the header must describe the tables {list(ALL_TABLES)}")
        for table, columns in tables.items():
            ours = dict(self._layout[table])
            described: dict[str, ColumnKind] = {}
            for item in columns if isinstance(columns, list) else [None]:
                if not (isinstance(item, list) and len(item) == 2):
                    raise self._fail(number, f"bad column description in {table}: {item!r}")
                name, kind = item
                if name not in ours:
                    raise self._fail(
                        number, f"column {table}.{name} is unknown to this version of the store"
                    )
                if kind != ours[name]:
                    raise self._fail(
                        number,
                        f"column {table}.{name} is {kind!r} in the file, {ours[name]!r} here",
                    )
                described[name] = kind
            self._columns[table] = described
        return version

    def _decode_row(self, number: int, table: str, row: Any) -> dict[str, Any]:
        columns = self._columns[table]
        if not isinstance(row, dict) or set(row) != set(columns):
            raise self._fail(number, f"a {table} row must carry exactly the header's columns")
        return {
            name: _decode(row[name], kind, f"{self.path}, line {number}, {table}.{name}")
            for name, kind in columns.items()
        }

    def sessions(self) -> Iterator[SessionRows]:
        """Every session block, checked; raises on the first problem in the file."""
        lines = self._lines()
        first = next(lines, None)
        if first is None:
            raise ExportFormatError(f"{self.path} is empty; it is not an {FORMAT_NAME} file")
        self._read_header(first[0], first[2])
        current: SessionRows | None = None
        digest = hashlib.sha256()
        seen: set[str] = set()
        totals = dict.fromkeys(ALL_TABLES, 0)
        number = first[0]
        for number, raw, document in lines:
            kind = document["kind"]
            if kind == "session":
                if current is not None:
                    raise self._fail(number, f"session {current.session_key!r} has no end line")
                session = self._decode_row(number, SESSIONS_TABLE, document.get("row"))
                current = SessionRows(session, {table: [] for table in CHILD_TABLES})
                if not isinstance(session.get("session_key"), str):
                    raise self._fail(number, "a session row needs a session_key")
                if current.session_key in seen:
                    raise self._fail(number, f"session {current.session_key!r} appears twice")
                digest = hashlib.sha256(raw)
            elif kind == "row":
                table = document.get("table")
                if current is None:
                    raise self._fail(number, "a row outside any session block")
                if table not in CHILD_TABLES:
                    raise self._fail(number, f"unknown table {table!r}")
                row = self._decode_row(number, table, document.get("row"))
                if row.get("session_key") != current.session_key:
                    raise self._fail(number, f"a {table} row of another session inside this block")
                current.children[table].append(row)
                digest.update(raw)
            elif kind == "end":
                if current is None or document.get("session_key") != current.session_key:
                    raise self._fail(number, "an end line that closes no session")
                if document.get("rows") != current.row_counts():
                    raise self._fail(
                        number, f"session {current.session_key!r} has missing or extra rows"
                    )
                expected = document.get("sha256")
                if expected is not None and expected != digest.hexdigest():
                    raise self._fail(
                        number, f"session {current.session_key!r} does not match its checksum"
                    )
                seen.add(current.session_key)
                self.block_hashes[current.session_key] = digest.hexdigest()
                totals[SESSIONS_TABLE] += 1
                for table, n in current.row_counts().items():
                    totals[table] += n
                yield current
                current = None
            elif kind == "footer":
                if current is not None:
                    raise self._fail(number, f"session {current.session_key!r} has no end line")
                if document.get("sessions") != len(seen) or document.get("rows") != totals:
                    raise self._fail(number, "the footer does not match the file's contents")
                if next(lines, None) is not None:
                    raise self._fail(number + 1, "lines after the footer")
                return
            else:
                raise self._fail(number, f"unknown record kind {kind!r}")
        raise ExportFormatError(
            f"{self.path} ends without its footer line after line {number} (truncated)"
        )

    def check(self) -> ExportFileInfo:
        """Read the whole file and check everything that can be checked without the
        target: the format, every value (:func:`check_session_values`), and that no two
        sessions share a session id, a row id or a summary slot. Raises on the first
        problem, naming the session."""
        info = ExportFileInfo(FORMAT_VERSION, [], dict.fromkeys(ALL_TABLES, 0))
        claims = _Claims(track_rows=True)
        layout: TableLayout | None = None
        for session in self.sessions():
            key = session.session_key
            if layout is None:
                layout = self.file_layout
            try:
                check_session_values(session, layout)
            except InvalidInputError as exc:
                raise ExportFormatError(f"{self.path}: {exc}") from None
            clash = claims.clash(session)
            if clash is not None:
                raise ExportFormatError(f"{self.path}: {clash}")
            claims.claim(session)
            info.session_keys.append(key)
            info.digests[key] = session_digest(session, layout)
            info.rows[SESSIONS_TABLE] += 1
            for table, n in session.row_counts().items():
                info.rows[table] += n
        info.blocks = dict(self.block_hashes)
        info.generations = claims.generations
        info.row_ids = claims.row_ids
        return info


# -- import ----------------------------------------------------------------------------


@dataclass
class ImportSummary:
    """``imported``: written by this run; ``unchanged``: already in the target with exactly
    the file's contents (an earlier run imported them); ``skipped``: in the target with other
    contents, left as they are (``if_exists="skip"``)."""

    imported: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    rows: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ALL_TABLES, 0))


def _listed(keys: Sequence[str], limit: int = 5) -> str:
    shown = ", ".join(repr(key) for key in list(keys)[:limit])
    return shown + (f" and {len(keys) - limit} more" if len(keys) > limit else "")


async def _present_sessions(
    storage: SessionStorage, info: ExportFileInfo, layout: TableLayout, batch_size: int
) -> tuple[list[str], list[str]]:
    """The file's keys that the target holds: ``(unchanged, different)``. Unchanged means
    every column the file describes holds exactly the file's value."""
    unchanged: list[str] = []
    different: list[str] = []
    for batch in _batches(info.session_keys, batch_size):
        present = await storage.existing_session_keys(batch)
        if not present:
            continue
        for rows in await storage.read_session_rows(sorted(present)):
            key = rows.session_key
            same = session_digest(rows, layout) == info.digests[key]
            (unchanged if same else different).append(key)
    return sorted(unchanged), sorted(different)


async def import_sessions(
    storage: SessionStorage,
    path: Path | str,
    *,
    if_exists: IfExists = "fail",
    batch_size: int = DEFAULT_BATCH,
) -> ImportSummary:
    """Import an export file, ids as in the file; each session in its own transaction.

    Everything that can be known before writing is checked first, and a problem refuses
    the whole file with nothing written: the format, version, completeness and checksums;
    every value, the way the store's own writers check it (so both backends take the same
    files); session ids and row ids shared between sessions of the file, or already held
    by other sessions in the target. A key already in the target with exactly the file's
    contents is ``unchanged`` (an earlier run imported it), so running an import again
    finishes it. A key there with other contents refuses the file (``if_exists="fail"``,
    ``SessionExistsError`` naming the keys) or is left as it is (``"skip"``).

    Should the target still fail a session (a concurrent writer, a lost connection), that
    session is not written, the error names it and the sessions imported before it, which
    stay; the same import run again skips them and finishes the job.
    """
    reader = ExportReader(path, storage.table_layout())
    info = await asyncio.to_thread(reader.check)
    layout = reader.file_layout
    unchanged, different = await _present_sessions(storage, info, layout, batch_size)
    if different and if_exists == "fail":
        raise SessionExistsError(
            f"{len(different)} session(s) in {reader.path} already exist in the target with "
            f"other contents ({_listed(different)}); nothing was imported (pass "
            "--skip-existing to import the others)"
        )
    present = set(unchanged) | set(different)
    generations = {sid: key for sid, key in info.generations.items() if key not in present}
    row_ids = {
        table: {ident: key for ident, key in ids.items() if key not in present}
        for table, ids in info.row_ids.items()
    }
    clashes = await _target_clashes(storage, generations, row_ids)
    if clashes:
        first = sorted(clashes)[0]
        raise ExportFormatError(
            f"{reader.path}: {clashes[first]}"
            + (f" ({len(clashes) - 1} more session(s) clash too)" if len(clashes) > 1 else "")
            + "; nothing was imported"
        )
    summary = ImportSummary(unchanged=unchanged)
    summary.skipped.extend(different)
    second = ExportReader(reader.path, storage.table_layout())
    for rows in second.sessions():
        key = rows.session_key
        if second.block_hashes.get(key) != info.blocks.get(key):
            raise _stopped(key, summary, "the file changed while it was being imported")
        if key in present:
            continue
        try:
            inserted = await storage.insert_session_rows(rows, if_exists="skip")
        except SessionStoreError as exc:
            raise _stopped(key, summary, str(exc)) from exc
        if not inserted:
            if if_exists == "skip":
                summary.skipped.append(key)
                continue
            raise _stopped(key, summary, "another writer created this key meanwhile")
        summary.imported.append(key)
        summary.rows[SESSIONS_TABLE] += 1
        for table, n in rows.row_counts().items():
            summary.rows[table] += n
        log.info("imported %s", key, extra={"session_key": key, "operation": "import"})
    return summary


def _stopped(key: str, summary: ImportSummary, reason: str) -> TransferError:
    """The error for an import that stopped at ``key``: what was written, what was not."""
    done = (
        f"{len(summary.imported)} session(s) imported before it stay ({_listed(summary.imported)})"
        if summary.imported
        else "no session was imported before it"
    )
    return TransferError(
        f"import stopped at session {key!r}, of which nothing was written: {reason}. {done}; "
        "run the same import again to finish (sessions already imported are recognised and "
        "left as they are)"
    )


# -- copy and verification -------------------------------------------------------------


@dataclass(frozen=True)
class CopyProgress:
    """Reported after each session: ``action`` is ``copied``, ``skipped`` (already there,
    identical), ``conflict`` (the key exists in the target with other contents) or
    ``refused`` (the session cannot be written to the target; ``CopyReport.refused`` says
    why)."""

    total: int
    done: int
    session_key: str
    action: str


@dataclass(frozen=True)
class TableCheck:
    table: str
    source_rows: int
    target_rows: int
    source_sha256: str
    target_sha256: str

    @property
    def ok(self) -> bool:
        return self.source_rows == self.target_rows and self.source_sha256 == self.target_sha256


@dataclass
class CopyReport:
    total: int = 0
    copied: int = 0
    skipped: int = 0
    conflicts: list[str] = field(default_factory=list)
    # key -> why the session could not be written to the target (nothing of it was).
    refused: dict[str, str] = field(default_factory=dict)
    rows: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ALL_TABLES, 0))
    checks: list[TableCheck] = field(default_factory=list)

    @property
    def verified(self) -> bool:
        return bool(self.checks) and all(check.ok for check in self.checks)

    @property
    def ok(self) -> bool:
        return not self.conflicts and not self.refused and (self.verified or self.total == 0)


async def table_checksums(
    storage: SessionStorage, session_keys: Sequence[str], *, batch_size: int = DEFAULT_BATCH
) -> dict[str, tuple[int, str]]:
    """``(rows, sha256)`` per table over the rows these sessions hold, in key then id order,
    each row in its canonical form (so SQLite and PostgreSQL agree exactly when the values
    are the same)."""
    layout = storage.table_layout()
    digests = {table: hashlib.sha256() for table in ALL_TABLES}
    counts = dict.fromkeys(ALL_TABLES, 0)
    for batch in _batches(_ordered(session_keys), batch_size):
        for rows in await storage.read_session_rows(batch):
            digests[SESSIONS_TABLE].update(canonical_row(rows.session, layout[SESSIONS_TABLE]))
            counts[SESSIONS_TABLE] += 1
            for table in CHILD_TABLES:
                for row in rows.rows(table):
                    digests[table].update(canonical_row(row, layout[table]))
                    counts[table] += 1
    return {table: (counts[table], digests[table].hexdigest()) for table in ALL_TABLES}


async def verify_copy(
    source: SessionStorage,
    target: SessionStorage,
    session_keys: Sequence[str],
    *,
    batch_size: int = DEFAULT_BATCH,
) -> list[TableCheck]:
    """Compare these sessions' rows in ``source`` and ``target``: counts and checksums."""
    ours = await table_checksums(source, session_keys, batch_size=batch_size)
    theirs = await table_checksums(target, session_keys, batch_size=batch_size)
    return [
        TableCheck(table, ours[table][0], theirs[table][0], ours[table][1], theirs[table][1])
        for table in ALL_TABLES
    ]


class _Refused(Exception):
    """One session the target cannot take; the copy records it and goes on."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


async def _insert_for_copy(target: SessionStorage, rows: SessionRows) -> bool:
    """Insert one session into the copy's target; ``False`` if its key got there first.

    A refusal of the data (a constraint, a value, a session id held by another key) is
    :class:`_Refused`: that session is reported and the copy goes on. Losing the target
    stops the copy with an error naming the session (whatever was committed stays)."""
    key = rows.session_key
    try:
        inserted = await target.insert_session_rows(rows, if_exists="skip")
    except DatabaseUnavailableError as exc:
        raise TransferError(
            f"copy stopped at session {key!r}, of which nothing was written: {exc}. Sessions "
            "copied before it stay; run the same copy again to finish"
        ) from exc
    except SessionStoreError as exc:
        raise _Refused(str(exc)) from exc
    if inserted:
        log.debug("copied %s", key, extra={"session_key": key, "operation": "copy"})
    return inserted


async def _place(
    target: SessionStorage,
    rows: SessionRows,
    present: set[str],
    theirs: dict[str, SessionRows],
    layout: TableLayout,
) -> str:
    """Copy one session unless its key is there: ``copied``, ``skipped`` or ``conflict``."""
    key = rows.session_key
    if key not in present and await _insert_for_copy(target, rows):
        return "copied"
    existing = theirs.get(key) or next(iter(await target.read_session_rows([key])), None)
    same = existing is not None and (
        session_digest(rows, layout) == session_digest(existing, layout)
    )
    return "skipped" if same else "conflict"


async def _together(jobs: int, work: list[Callable[[], Awaitable[T]]]) -> list[T]:
    """Run ``work`` at most ``jobs`` at a time, results in order. On the first failure the
    others are cancelled (an open transaction rolls back) and the failure propagates."""
    if jobs <= 1:
        return [await item() for item in work]
    gate = asyncio.Semaphore(jobs)

    async def gated(item: Callable[[], Awaitable[T]]) -> T:
        async with gate:
            return await item()

    tasks = [asyncio.ensure_future(gated(item)) for item in work]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


async def _admit(
    target: SessionStorage,
    bundles: list[SessionRows],
    present: set[str],
    layout: TableLayout,
    claims: _Claims,
) -> dict[str, str]:
    """Check a batch before any of it is written: key -> why the target cannot take that
    session (a value, a session id another key holds, a row id in use there)."""
    refused: dict[str, str] = {}
    admitted: list[SessionRows] = []
    for rows in bundles:
        key = rows.session_key
        try:
            check_session_values(rows, layout)
        except InvalidInputError as exc:
            refused[key] = str(exc)
            continue
        clash = claims.clash(rows)
        if clash is not None:
            refused[key] = clash
            continue
        claims.claim(rows)
        if key not in present:
            admitted.append(rows)
    generations = {sid: rows.session_key for rows in admitted for sid in generation_ids(rows)}
    row_ids = {
        table: {row["id"]: rows.session_key for rows in admitted for row in rows.rows(table)}
        for table in CHILD_TABLES
    }
    refused.update(await _target_clashes(target, generations, row_ids))
    return refused


async def copy_sessions(
    source: SessionStorage,
    target: SessionStorage,
    *,
    batch_size: int = DEFAULT_BATCH,
    jobs: int = DEFAULT_JOBS,
    on_progress: Callable[[CopyProgress], None] | None = None,
    verify: bool = True,
) -> CopyReport:
    """Copy every session of ``source`` into ``target``, ids and every column kept.

    Sessions are read in batches (one snapshot each; the next batch is read while the
    current one is written) and each is written in its own target transaction, up to
    ``jobs`` at a time, so an interrupted copy leaves whole sessions only; running it again
    skips the sessions already there with identical contents and copies the rest. A key
    that exists in the target with other contents is never overwritten: it is reported in
    ``conflicts``. Each session is checked before it is written, the way import checks a
    file (values, session ids, row ids); one the target cannot take is not written and is
    reported in ``refused`` with the reason, and the copy goes on. Every error names its
    session. At the end the sessions are verified table by table.
    """
    layout = source.table_layout()
    keys = _ordered(await source.list_session_keys())
    batches = list(_batches(keys, batch_size))
    report = CopyReport(total=len(keys))
    claims = _Claims(track_rows=False)  # the source's primary keys keep row ids unique
    done = 0

    def record(rows: SessionRows, action: str) -> None:
        nonlocal done
        key = rows.session_key
        if action == "copied":
            report.copied += 1
            report.rows[SESSIONS_TABLE] += 1
            for table, n in rows.row_counts().items():
                report.rows[table] += n
        elif action == "skipped":
            report.skipped += 1
        elif action == "conflict":
            report.conflicts.append(key)
            log.warning(
                "%s exists in the target with other contents; left as it is",
                key,
                extra={"session_key": key, "operation": "copy"},
            )
        else:
            log.warning(
                "%s was not copied: %s",
                key,
                report.refused[key],
                extra={"session_key": key, "operation": "copy"},
            )
        done += 1
        if on_progress is not None:
            on_progress(CopyProgress(len(keys), done, key, action))

    def placing(
        rows: SessionRows, present: set[str], theirs: dict[str, SessionRows]
    ) -> Callable[[], Awaitable[None]]:
        async def run() -> None:
            key = rows.session_key
            if key in report.refused:
                record(rows, "refused")
                return
            try:
                action = await _place(target, rows, present, theirs, layout)
            except _Refused as refusal:
                report.refused[key] = refusal.reason
                action = "refused"
            record(rows, action)

        return run

    reading: asyncio.Future[list[SessionRows]] | None = None
    try:
        for index, batch in enumerate(batches):
            bundles = (
                await reading if reading is not None else await source.read_session_rows(batch)
            )
            reading = None
            if index + 1 < len(batches):
                reading = asyncio.ensure_future(source.read_session_rows(batches[index + 1]))
            present = await target.existing_session_keys([rows.session_key for rows in bundles])
            report.refused.update(await _admit(target, bundles, present, layout, claims))
            theirs = (
                {r.session_key: r for r in await target.read_session_rows(sorted(present))}
                if present
                else {}
            )
            await _together(jobs, [placing(rows, present, theirs) for rows in bundles])
    finally:
        if reading is not None:
            reading.cancel()
            await asyncio.gather(reading, return_exceptions=True)
    report.conflicts.sort()
    report.refused = dict(sorted(report.refused.items()))
    if verify and keys:
        report.checks = await verify_copy(source, target, keys, batch_size=batch_size)
    return report


__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "CopyProgress",
    "CopyReport",
    "ExportFileInfo",
    "ExportFormatError",
    "ExportReader",
    "ExportSummary",
    "ExportWriter",
    "ImportSummary",
    "TableCheck",
    "TransferError",
    "canonical_row",
    "check_session_values",
    "copy_sessions",
    "export_sessions",
    "export_to_file",
    "generation_ids",
    "import_sessions",
    "session_digest",
    "table_checksums",
    "verify_copy",
]
