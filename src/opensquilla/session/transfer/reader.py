"""Reading and checking an export file (:mod:`.format`) before anything is imported.

The whole file is checked before anything is written, every value included: the format,
the version, each block against its ``end`` line, the public models' value domain (the same
on both backends), and that no two sessions share a session id, a row id or a summary slot.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..db.tables import CHILD_TABLES, SESSIONS_TABLE
from ..db.tables import OUR_TABLES as ALL_TABLES
from ..errors import InvalidInputError
from ..models.reports import ColumnKind, SessionRows, TableLayout
from .canonical import session_digest
from .checks import Claims, check_session_values
from .errors import ExportFormatError
from .format import (
    FORMAT_NAME,
    FORMAT_VERSION,
    EndRecord,
    FooterRecord,
    HeaderRecord,
    RowRecord,
    SessionRecord,
    decode_line,
    decode_value,
    parse_record,
)


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
                    document = decode_line(raw)
                except RecursionError:
                    raise self._fail(number, "a value is nested too deeply to read") from None
                except ValueError as exc:  # UnicodeDecodeError is a ValueError
                    raise self._fail(number, f"not a JSON object ({exc})") from None
                if not isinstance(document, dict) or not isinstance(document.get("kind"), str):
                    raise self._fail(number, "not an export record (no 'kind')")
                yield number, raw, document

    def _read_header(self, number: int, document: dict[str, Any]) -> int:
        header = parse_record(document)
        if not isinstance(header, HeaderRecord) or header.format != FORMAT_NAME:
            raise self._fail(number, f"not an {FORMAT_NAME} file (no header line)")
        version = header.version
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise self._fail(number, f"invalid format version {version!r}")
        if version > FORMAT_VERSION:
            raise ExportFormatError(
                f"{self.path} uses export format version {version}, which is newer than this "
                f"opensquilla-session understands (version {FORMAT_VERSION}); "
                "upgrade opensquilla-session to import it"
            )
        tables = header.tables
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
            name: decode_value(row[name], kind, f"{self.path}, line {number}, {table}.{name}")
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
            record = parse_record(document)
            if isinstance(record, SessionRecord):
                if current is not None:
                    raise self._fail(number, f"session {current.session_key!r} has no end line")
                session = self._decode_row(number, SESSIONS_TABLE, record.row)
                current = SessionRows(session, {table: [] for table in CHILD_TABLES})
                if not isinstance(session.get("session_key"), str):
                    raise self._fail(number, "a session row needs a session_key")
                if current.session_key in seen:
                    raise self._fail(number, f"session {current.session_key!r} appears twice")
                digest = hashlib.sha256(raw)
            elif isinstance(record, RowRecord):
                table = record.table
                if current is None:
                    raise self._fail(number, "a row outside any session block")
                if table not in CHILD_TABLES:
                    raise self._fail(number, f"unknown table {table!r}")
                row = self._decode_row(number, table, record.row)
                if row.get("session_key") != current.session_key:
                    raise self._fail(number, f"a {table} row of another session inside this block")
                current.children[table].append(row)
                digest.update(raw)
            elif isinstance(record, EndRecord):
                if current is None or record.session_key != current.session_key:
                    raise self._fail(number, "an end line that closes no session")
                if record.rows != current.row_counts(CHILD_TABLES):
                    raise self._fail(
                        number, f"session {current.session_key!r} has missing or extra rows"
                    )
                expected = record.sha256
                if expected is not None and expected != digest.hexdigest():
                    raise self._fail(
                        number, f"session {current.session_key!r} does not match its checksum"
                    )
                seen.add(current.session_key)
                self.block_hashes[current.session_key] = digest.hexdigest()
                totals[SESSIONS_TABLE] += 1
                for table, n in current.row_counts(CHILD_TABLES).items():
                    totals[table] += n
                yield current
                current = None
            elif isinstance(record, FooterRecord):
                if current is not None:
                    raise self._fail(number, f"session {current.session_key!r} has no end line")
                if record.sessions != len(seen) or record.rows != totals:
                    raise self._fail(number, "the footer does not match the file's contents")
                if next(lines, None) is not None:
                    raise self._fail(number + 1, "lines after the footer")
                return
            else:  # a kind no record has, or a second header
                raise self._fail(number, f"unknown record kind {document['kind']!r}")
        raise ExportFormatError(
            f"{self.path} ends without its footer line after line {number} (truncated)"
        )

    def check(self) -> ExportFileInfo:
        """Read the whole file and check everything that can be checked without the
        target: the format, every value (:func:`check_session_values`), and that no two
        sessions share a session id, a row id or a summary slot. Raises on the first
        problem, naming the session."""
        info = ExportFileInfo(FORMAT_VERSION, [], dict.fromkeys(ALL_TABLES, 0))
        claims = Claims(track_rows=True)
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
            for table, n in session.row_counts(CHILD_TABLES).items():
                info.rows[table] += n
        info.blocks = dict(self.block_hashes)
        info.generations = claims.generations
        info.row_ids = claims.row_ids
        return info
