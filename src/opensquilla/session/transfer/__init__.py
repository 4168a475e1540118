"""Moving whole sessions: export to a file, import from one, copy between two databases.

One module per job:

- :mod:`.format`: the export format (records, lines, values) and its version;
- :mod:`.writer` and :mod:`.reader`: writing it, and reading and checking a file;
- :mod:`.canonical`: exact comparison of stored values across backends;
- :mod:`.checks`: what must hold before a session is written (values, ids);
- :mod:`.destinations`: where an export may be written without destroying anything;
- :mod:`.exchange`: export and import; :mod:`.copy`: copy between stores, and verify;
- :mod:`.store`: every storage call the package makes.

Import and copy write rows exactly as given, ids included, past the manager, so both check
everything they can before writing, and write each session in one transaction: an
interrupted run leaves whole sessions only, and running it again finishes it.
"""

from __future__ import annotations

from .canonical import canonical_row, session_digest
from .checks import check_session_values, generation_ids
from .copy import (
    DEFAULT_JOBS,
    CopyProgress,
    CopyReport,
    TableCheck,
    copy_sessions,
    table_checksums,
    verify_copy,
)
from .errors import ExportFormatError, TransferError
from .exchange import ImportSummary, export_sessions, export_to_file, import_sessions
from .format import FORMAT_NAME, FORMAT_VERSION
from .reader import ExportFileInfo, ExportReader
from .store import DEFAULT_BATCH
from .writer import ExportSummary, ExportWriter

__all__ = [
    "DEFAULT_BATCH",
    "DEFAULT_JOBS",
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
