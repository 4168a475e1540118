"""Export to a file and import from one.

Import checks the whole file before anything is written (:meth:`.ExportReader.check`), then
the target: session ids that belong to one session only, row ids unused there. Each session
is imported in one transaction; a session already in the target with exactly the file's
contents is recognised, so running an interrupted import again finishes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from ..db.tables import CHILD_TABLES, SESSIONS_TABLE
from ..db.tables import OUR_TABLES as ALL_TABLES
from ..errors import SessionExistsError, SessionNotFoundError, SessionStoreError
from ..keys import canonicalize_session_key
from ..models.reports import IfExists, TableLayout
from ..storage import SessionStorage
from .canonical import session_digest
from .checks import target_clashes
from .destinations import open_stream, prepare
from .errors import ExportFormatError, TransferError
from .reader import ExportFileInfo, ExportReader
from .store import DEFAULT_BATCH, TransferStore, batches, ordered
from .writer import ExportSummary, ExportWriter

# The package's name, as the single module before it had: the CLI's log lines show it.
log = logging.getLogger(__package__)


# -- export ----------------------------------------------------------------------------


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
    store = TransferStore(storage, operation="export")
    writer = ExportWriter(out, store.layout())
    if session_keys is None:
        keys = await store.all_keys()
    else:
        # A key as stored first (legacy keys need not be canonical), else its canonical form.
        given = list(session_keys)
        found = await store.existing(given)
        keys = ordered([key if key in found else canonicalize_session_key(key) for key in given])
        missing = sorted(set(keys) - found - await store.existing(keys))
        if missing:
            raise SessionNotFoundError(f"Session not found: {', '.join(missing[:5])}")
    writer.header()
    for batch in batches(keys, batch_size):
        for rows in await store.read(batch):
            writer.session(rows)
            log.debug(
                "exported %s",
                rows.session_key,
                extra={"session_key": rows.session_key, "operation": "export"},
            )
    writer.footer()
    return writer.summary


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
    database = TransferStore(storage, operation="export").database_file
    kind, destination = await asyncio.to_thread(prepare, path, database)
    if kind == "stream":
        out = await asyncio.to_thread(open_stream, destination)
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
    store: TransferStore, info: ExportFileInfo, layout: TableLayout, batch_size: int
) -> tuple[list[str], list[str]]:
    """The file's keys that the target holds: ``(unchanged, different)``. Unchanged means
    every column the file describes holds exactly the file's value."""
    unchanged: list[str] = []
    different: list[str] = []
    for batch in batches(info.session_keys, batch_size):
        present = await store.existing(batch)
        if not present:
            continue
        for rows in await store.read(sorted(present)):
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
    store = TransferStore(storage, operation="import")
    reader = ExportReader(path, store.layout())
    info = await asyncio.to_thread(reader.check)
    layout = reader.file_layout
    unchanged, different = await _present_sessions(store, info, layout, batch_size)
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
    clashes = await target_clashes(store, generations, row_ids)
    if clashes:
        first = sorted(clashes)[0]
        raise ExportFormatError(
            f"{reader.path}: {clashes[first]}"
            + (f" ({len(clashes) - 1} more session(s) clash too)" if len(clashes) > 1 else "")
            + "; nothing was imported"
        )
    summary = ImportSummary(unchanged=unchanged)
    summary.skipped.extend(different)
    second = ExportReader(reader.path, store.layout())
    for rows in second.sessions():
        key = rows.session_key
        if second.block_hashes.get(key) != info.blocks.get(key):
            raise _stopped(key, summary, "the file changed while it was being imported")
        if key in present:
            continue
        try:
            inserted = await store.insert(rows)
        except SessionStoreError as exc:
            raise _stopped(key, summary, str(exc)) from exc
        if not inserted:
            if if_exists == "skip":
                summary.skipped.append(key)
                continue
            raise _stopped(key, summary, "another writer created this key meanwhile")
        summary.imported.append(key)
        summary.rows[SESSIONS_TABLE] += 1
        for table, n in rows.row_counts(CHILD_TABLES).items():
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
