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
nothing is truncated), integers as integers, ``float`` columns as numbers (``"NaN"``,
``"Infinity"`` and ``"-Infinity"`` as strings), ``json`` columns as the JSON value itself,
SQL ``NULL`` as ``null``. Sessions appear in code-point order of their keys, so exporting,
importing into an empty database and exporting again gives the same bytes.

An importer refuses a file whose version is newer than it knows, a column it does not know,
and any block that is incomplete or does not match its ``end`` line; the whole file is
checked before anything is written. Each session is imported in one transaction.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import math
import os
import uuid
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, TypeVar

from .errors import (
    IntegrityViolationError,
    SessionExistsError,
    SessionNotFoundError,
    SessionStoreError,
)
from .keys import canonicalize_session_key
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
_EXACT_INT_LIMIT = 2**63


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


def _canonical_json(value: Any) -> Any:
    """A JSON value with numbers compared by value: PostgreSQL's ``jsonb`` gives ``1e16`` back
    as ``10000000000000000``, so integral floats and the integers they equal agree."""
    if isinstance(value, dict):
        return {key: _canonical_json(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_canonical_json(item) for item in value]
    if isinstance(value, bool) or not isinstance(value, int | float):
        return value
    if isinstance(value, int):
        if abs(value) < _EXACT_INT_LIMIT:
            return value
        try:
            return float(value)
        except OverflowError:
            return value
    if value.is_integer() and abs(value) < _EXACT_INT_LIMIT:
        return int(value)
    return value


def _canonical_value(value: Any, kind: ColumnKind) -> Any:
    if value is None:
        return None
    if kind == "json":
        return _canonical_json(value)
    if kind == "float":
        return float(value)
    if kind == "bool":
        return bool(value)
    return value


def canonical_row(row: dict[str, Any], columns: Sequence[tuple[str, ColumnKind]]) -> bytes:
    """One row in a form that is equal across backends exactly when the rows hold the same
    values: for checksums and "already copied" checks, not for files."""
    values = [_canonical_value(row.get(name), kind) for name, kind in columns]
    text = json.dumps(values, sort_keys=True, ensure_ascii=True, separators=(",", ":"))
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


# -- export ----------------------------------------------------------------------------


def _line(document: dict[str, Any]) -> bytes:
    text = json.dumps(document, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
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


def _private_temporary(path: Path) -> tuple[Path, Path, int]:
    """``(final path, temporary path, fd)``: an owner-only temporary file next to ``path``
    (which may start with ``~``)."""
    final = path.expanduser()
    temporary = final.with_name(f".{final.name}.{uuid.uuid4().hex}.tmp")
    return final, temporary, os.open(temporary, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)


async def export_to_file(
    storage: SessionStorage,
    path: Path,
    *,
    session_keys: Sequence[str] | None = None,
    batch_size: int = DEFAULT_BATCH,
) -> ExportSummary:
    """Export to ``path``: owner-only (0600), written to a temporary file and renamed into
    place, so ``path`` never holds half an export."""
    final, temporary, fd = _private_temporary(path)
    try:
        with os.fdopen(fd, "wb") as out:
            summary = await export_sessions(
                storage, out, session_keys=session_keys, batch_size=batch_size
            )
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, final)
    except BaseException:
        os.unlink(temporary)
        raise
    return summary


# -- reading an export -----------------------------------------------------------------


@dataclass
class ExportFileInfo:
    """What a checked export file holds."""

    version: int
    session_keys: list[str]
    rows: dict[str, int]


class ExportReader:
    """Reads and checks an export file; :meth:`sessions` yields each block, decoded."""

    def __init__(self, path: Path | str, layout: TableLayout) -> None:
        self.path = Path(path).expanduser()
        self._layout = layout
        self._columns: dict[str, dict[str, ColumnKind]] = {}

    def _fail(self, number: int, message: str) -> ExportFormatError:
        return ExportFormatError(f"{self.path}, line {number}: {message}")

    def _lines(self) -> Iterator[tuple[int, bytes, dict[str, Any]]]:
        with open(self.path, "rb") as stream:
            for number, raw in enumerate(stream, start=1):
                if not raw.endswith(b"\n"):
                    raise self._fail(number, "the file ends in the middle of a line (truncated)")
                try:
                    document = json.loads(raw)
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
        """Read the whole file and check it, keeping only the keys."""
        keys: list[str] = []
        rows = dict.fromkeys(ALL_TABLES, 0)
        for session in self.sessions():
            keys.append(session.session_key)
            rows[SESSIONS_TABLE] += 1
            for table, n in session.row_counts().items():
                rows[table] += n
        return ExportFileInfo(FORMAT_VERSION, keys, rows)


# -- import ----------------------------------------------------------------------------


@dataclass
class ImportSummary:
    imported: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    rows: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ALL_TABLES, 0))


async def import_sessions(
    storage: SessionStorage,
    path: Path | str,
    *,
    if_exists: IfExists = "fail",
    batch_size: int = DEFAULT_BATCH,
) -> ImportSummary:
    """Import an export file; each session in its own transaction, ids as in the file.

    The whole file is checked first (format, version, completeness, checksums). A key that
    already exists in the target: with ``if_exists="fail"`` (the default) the import is
    refused before anything is written (``SessionExistsError`` naming the keys); with
    ``"skip"`` those sessions are left as they are and reported in ``skipped``.
    """
    reader = ExportReader(path, storage.table_layout())
    info = await asyncio.to_thread(reader.check)
    existing: set[str] = set()
    for batch in _batches(info.session_keys, batch_size):
        existing |= await storage.existing_session_keys(batch)
    if existing and if_exists == "fail":
        shown = ", ".join(sorted(existing)[:5]) + (" ..." if len(existing) > 5 else "")
        raise SessionExistsError(
            f"{len(existing)} session(s) in {path} already exist in the target ({shown}); "
            "nothing was imported (pass --skip-existing to import the others)"
        )
    summary = ImportSummary()
    for rows in reader.sessions():
        key = rows.session_key
        if key in existing:
            summary.skipped.append(key)
            continue
        try:
            inserted = await storage.insert_session_rows(rows, if_exists=if_exists)
        except IntegrityViolationError as exc:
            raise TransferError(
                f"session {key!r} could not be imported (nothing of it was written): {exc}. "
                "Its row ids may already be taken in the target; import into an empty database"
            ) from exc
        if not inserted:
            summary.skipped.append(key)
            continue
        summary.imported.append(key)
        summary.rows[SESSIONS_TABLE] += 1
        for table, n in rows.row_counts().items():
            summary.rows[table] += n
        log.info("imported %s", key, extra={"session_key": key, "operation": "import"})
    return summary


# -- copy and verification -------------------------------------------------------------


@dataclass(frozen=True)
class CopyProgress:
    """Reported after each session: ``action`` is ``copied``, ``skipped`` (already there,
    identical) or ``conflict`` (the key exists in the target with other contents)."""

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
    rows: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ALL_TABLES, 0))
    checks: list[TableCheck] = field(default_factory=list)

    @property
    def verified(self) -> bool:
        return bool(self.checks) and all(check.ok for check in self.checks)

    @property
    def ok(self) -> bool:
        return not self.conflicts and (self.verified or self.total == 0)


async def table_checksums(
    storage: SessionStorage, session_keys: Sequence[str], *, batch_size: int = DEFAULT_BATCH
) -> dict[str, tuple[int, str]]:
    """``(rows, sha256)`` per table over the rows these sessions hold, in key then id order,
    each row in its canonical form (so SQLite and PostgreSQL agree on equal data)."""
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


async def _insert_for_copy(target: SessionStorage, rows: SessionRows) -> bool:
    """Insert one session into the copy's target; ``False`` if its key got there first."""
    try:
        inserted = await target.insert_session_rows(rows, if_exists="skip")
    except IntegrityViolationError as exc:
        raise TransferError(
            f"session {rows.session_key!r} could not be copied (nothing of it was written): "
            f"{exc}. Its row ids may already be taken in the target; copy into an empty database"
        ) from exc
    if inserted:
        log.debug(
            "copied %s",
            rows.session_key,
            extra={"session_key": rows.session_key, "operation": "copy"},
        )
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
    ``conflicts``. At the end the copied sessions are verified table by table.
    """
    layout = source.table_layout()
    keys = _ordered(await source.list_session_keys())
    batches = list(_batches(keys, batch_size))
    report = CopyReport(total=len(keys))
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
        else:
            report.conflicts.append(key)
            log.warning(
                "%s exists in the target with other contents; left as it is",
                key,
                extra={"session_key": key, "operation": "copy"},
            )
        done += 1
        if on_progress is not None:
            on_progress(CopyProgress(len(keys), done, key, action))

    def placing(
        rows: SessionRows, present: set[str], theirs: dict[str, SessionRows]
    ) -> Callable[[], Awaitable[None]]:
        async def run() -> None:
            record(rows, await _place(target, rows, present, theirs, layout))

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
    "copy_sessions",
    "export_sessions",
    "export_to_file",
    "import_sessions",
    "session_digest",
    "table_checksums",
    "verify_copy",
]
