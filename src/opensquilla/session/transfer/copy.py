"""Copy every session between two stores, then verify the copy table by table.

Copy checks each session the way import checks a file before writing it (:mod:`.checks`)
and compares values exactly (:func:`.canonical_row`): ``1``, ``1.0`` and ``True`` differ,
floats by their bits.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from ..db.tables import CHILD_TABLES, SESSIONS_TABLE
from ..db.tables import OUR_TABLES as ALL_TABLES
from ..errors import DatabaseUnavailableError, InvalidInputError, SessionStoreError
from ..models.reports import SessionRows, TableLayout
from ..storage import SessionStorage
from .canonical import canonical_row, session_digest
from .checks import Claims, check_session_values, generation_ids, target_clashes
from .errors import TransferError
from .store import DEFAULT_BATCH, TransferStore, batches, ordered

# The package's name, as the single module before it had: the CLI's log lines show it.
log = logging.getLogger(__package__)

DEFAULT_JOBS = 4


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


# -- verification ----------------------------------------------------------------------


async def table_checksums(
    storage: SessionStorage, session_keys: Sequence[str], *, batch_size: int = DEFAULT_BATCH
) -> dict[str, tuple[int, str]]:
    """``(rows, sha256)`` per table over the rows these sessions hold, in key then id order,
    each row in its canonical form (so SQLite and PostgreSQL agree exactly when the values
    are the same)."""
    store = TransferStore(storage, operation="copy")
    layout = store.layout()
    digests = {table: hashlib.sha256() for table in ALL_TABLES}
    counts = dict.fromkeys(ALL_TABLES, 0)
    for batch in batches(ordered(session_keys), batch_size):
        for rows in await store.read(batch):
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


# -- one session -----------------------------------------------------------------------


class _Refused(Exception):
    """One session the target cannot take; the copy records it and goes on."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


async def _insert_for_copy(target: TransferStore, rows: SessionRows) -> bool:
    """Insert one session into the copy's target; ``False`` if its key got there first.

    A refusal of the data (a constraint, a value, a session id held by another key) is
    :class:`_Refused`: that session is reported and the copy goes on. Losing the target
    stops the copy with an error naming the session (whatever was committed stays)."""
    key = rows.session_key
    try:
        inserted = await target.insert(rows)
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
    target: TransferStore,
    rows: SessionRows,
    present: set[str],
    theirs: dict[str, SessionRows],
    layout: TableLayout,
) -> str:
    """Copy one session unless its key is there: ``copied``, ``skipped`` or ``conflict``."""
    key = rows.session_key
    if key not in present and await _insert_for_copy(target, rows):
        return "copied"
    existing = theirs.get(key) or next(iter(await target.read([key])), None)
    same = existing is not None and (
        session_digest(rows, layout) == session_digest(existing, layout)
    )
    return "skipped" if same else "conflict"


async def _bounded(jobs: int, work: list[Callable[[], Awaitable[None]]]) -> None:
    """Run ``work`` at most ``jobs`` at a time. On the first failure the others are
    cancelled (an open transaction rolls back) and that failure propagates as itself, not
    inside an exception group: the CLI tells errors apart by their type."""
    if jobs <= 1:
        for item in work:
            await item()
        return
    gate = asyncio.Semaphore(jobs)

    async def gated(item: Callable[[], Awaitable[None]]) -> None:
        async with gate:
            await item()

    try:
        async with asyncio.TaskGroup() as group:
            for item in work:
                group.create_task(gated(item))
    except BaseExceptionGroup as grouped:  # KeyboardInterrupt and SystemExit come bare
        failure = grouped.exceptions[0]  # the first task to fail; the rest came after it
    else:
        return
    raise failure


async def _admit(
    target: TransferStore,
    bundles: list[SessionRows],
    present: set[str],
    layout: TableLayout,
    claims: Claims,
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
    refused.update(await target_clashes(target, generations, row_ids))
    return refused


# -- the whole copy --------------------------------------------------------------------


class _Copy:
    """One run of :func:`copy_sessions`: the report it fills and the progress it reports."""

    def __init__(
        self,
        target: TransferStore,
        layout: TableLayout,
        total: int,
        on_progress: Callable[[CopyProgress], None] | None,
    ) -> None:
        self._target = target
        self._layout = layout
        self._on_progress = on_progress
        self.report = CopyReport(total=total)
        self._done = 0

    def _record(self, rows: SessionRows, action: str) -> None:
        report = self.report
        key = rows.session_key
        if action == "copied":
            report.copied += 1
            report.rows[SESSIONS_TABLE] += 1
            for table, n in rows.row_counts(CHILD_TABLES).items():
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
        self._done += 1
        if self._on_progress is not None:
            self._on_progress(CopyProgress(report.total, self._done, key, action))

    def placing(
        self, rows: SessionRows, present: set[str], theirs: dict[str, SessionRows]
    ) -> Callable[[], Awaitable[None]]:
        """The work of copying one session of an admitted batch, and recording it."""

        async def run() -> None:
            key = rows.session_key
            if key in self.report.refused:
                self._record(rows, "refused")
                return
            try:
                action = await _place(self._target, rows, present, theirs, self._layout)
            except _Refused as refusal:
                self.report.refused[key] = refusal.reason
                action = "refused"
            self._record(rows, action)

        return run


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
    reading_from = TransferStore(source, operation="copy")
    writing_to = TransferStore(target, operation="copy")
    layout = reading_from.layout()
    keys = await reading_from.all_keys()
    batched = list(batches(keys, batch_size))
    run = _Copy(writing_to, layout, len(keys), on_progress)
    report = run.report
    claims = Claims(track_rows=False)  # the source's primary keys keep row ids unique
    reading: asyncio.Future[list[SessionRows]] | None = None
    try:
        for index, batch in enumerate(batched):
            bundles = await reading if reading is not None else await reading_from.read(batch)
            reading = None
            if index + 1 < len(batched):
                reading = asyncio.ensure_future(reading_from.read(batched[index + 1]))
            present = await writing_to.existing([rows.session_key for rows in bundles])
            report.refused.update(await _admit(writing_to, bundles, present, layout, claims))
            theirs = (
                {r.session_key: r for r in await writing_to.read(sorted(present))}
                if present
                else {}
            )
            await _bounded(jobs, [run.placing(rows, present, theirs) for rows in bundles])
    finally:
        if reading is not None:
            reading.cancel()
            await asyncio.gather(reading, return_exceptions=True)
    report.conflicts.sort()
    report.refused = dict(sorted(report.refused.items()))
    if verify and keys:
        report.checks = await verify_copy(source, target, keys, batch_size=batch_size)
    return report
