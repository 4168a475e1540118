"""Writing the export format (:mod:`.format`) to a binary stream, one session at a time."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import IO, Any

from ..db.tables import CHILD_TABLES, SESSIONS_TABLE
from ..db.tables import OUR_TABLES as ALL_TABLES
from ..models.reports import SessionRows, TableLayout
from .format import (
    FORMAT_NAME,
    FORMAT_VERSION,
    EndRecord,
    FooterRecord,
    HeaderRecord,
    RowRecord,
    SessionRecord,
    encode_line,
    encode_value,
)


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
        header = HeaderRecord(format=FORMAT_NAME, version=FORMAT_VERSION, tables=tables)
        self._write(encode_line(header))

    def _row(self, table: str, row: dict[str, Any], key: str) -> dict[str, Any]:
        return {
            name: encode_value(row[name], kind, f"{table}.{name} (session {key!r})")
            for name, kind in self._layout[table]
        }

    def session(self, rows: SessionRows) -> None:
        """One session's block: every line is encoded (and every value checked) before the
        first is written, so a value the format cannot carry leaves no half block."""
        key = rows.session_key
        block = [encode_line(SessionRecord(row=self._row(SESSIONS_TABLE, rows.session, key)))]
        for table in CHILD_TABLES:
            for row in rows.rows(table):
                block.append(encode_line(RowRecord(table=table, row=self._row(table, row, key))))
        digest = hashlib.sha256()
        for line in block:
            digest.update(line)
            self._write(line)
        counts = rows.row_counts(CHILD_TABLES)
        end = EndRecord(session_key=key, rows=counts, sha256=digest.hexdigest())
        self._write(encode_line(end))
        self.summary.sessions += 1
        self.summary.rows[SESSIONS_TABLE] += 1
        for table, n in counts.items():
            self.summary.rows[table] += n

    def footer(self) -> None:
        summary = self.summary
        self._write(encode_line(FooterRecord(sessions=summary.sessions, rows=dict(summary.rows))))
