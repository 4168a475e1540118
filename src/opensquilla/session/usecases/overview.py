"""Operator tasks behind the command line: schema status and moves, store statistics.

Each takes a DSN (or the unit of work and the archive place of an open store) and returns
plain data; printing is the caller's job. Schema commands open the database *without*
migrating it (the engine's lifecycle, ``db/lifecycle.py``), so ``current`` and ``check``
report the database as it is.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from ..db import migrate
from ..db.layout import parse as parse_layout
from ..db.lifecycle import StorageLifecycle
from ..db.migrate import RevisionInfo as RevisionInfo
from ..db.uow import UnitOfWork
from ..errors import MigrationError
from ..fs.archive_place import ArchivePlace
from ..fs.reset_archive import (
    RecoveredArchive,
    StagedArchive,
    published_archives,
    staged_archives,
)
from ..models.reports import StoreCounts


@contextlib.asynccontextmanager
async def unmigrated(dsn: str, *, create: bool = True) -> AsyncIterator[StorageLifecycle]:
    """An engine on ``dsn`` whose schema is left exactly as it is; with ``create=False`` a
    missing SQLite file is ``DatabaseNotFoundError`` (nothing is created)."""
    storage = StorageLifecycle(dsn, create=create)
    await storage.connect_without_migrating()
    try:
        yield storage
    finally:
        await storage.close()


async def require_store(dsn: str) -> None:
    """Refuse, naming the reason, a database that holds no store (a reporting command
    does not create one: ``db upgrade`` does); a missing SQLite file is
    ``DatabaseNotFoundError``."""
    async with unmigrated(dsn, create=False) as storage:
        reason = await migrate.why_no_store(storage.engine)
        if reason is not None:
            raise MigrationError(
                f"no opensquilla-session store in {storage.target.render()}: {reason}; "
                "'opensquilla-session db upgrade' creates one"
            )


@dataclass(frozen=True)
class SchemaReport:
    """Where a database stands against this code."""

    current: tuple[str, ...]
    heads: tuple[str, ...]
    unknown: tuple[str, ...]  # revisions in the database this code does not know
    drift: tuple[str, ...]
    layout: str = "none"  # plain, partitioned:N (db/layout.py), or none (no tables yet)

    @property
    def state(self) -> str:
        """``up-to-date``, ``ahead`` (migrated by newer code), ``behind``, or ``drift``."""
        if self.unknown:
            return "ahead"
        if set(self.current) != set(self.heads):
            return "behind"
        if self.drift:
            return "drift"
        return "up-to-date"

    @property
    def ok(self) -> bool:
        return self.state == "up-to-date"


async def schema_report(dsn: str) -> SchemaReport:
    async with unmigrated(dsn, create=False) as storage:
        status = await migrate.check(storage.engine)
        found = await migrate.current_layout(storage.engine)
    unknown = tuple(sorted(set(status.current) - migrate.known_revisions()))
    shown = "none" if found is None else str(found)
    return SchemaReport(status.current, status.heads, unknown, status.drift, shown)


async def repair_indexes(dsn: str) -> tuple[str, ...]:
    """Create the declared indexes the database lacks or holds invalid
    (docs/migrations.md#missing-indexes); the names created. Refused (``MigrationError``,
    nothing created) unless the schema, re-read under the migration lock, is at the head this
    code declares."""
    async with unmigrated(dsn, create=False) as storage:
        return tuple(await migrate.repair_indexes(storage.engine))


async def current_revisions(dsn: str) -> tuple[str, ...]:
    async with unmigrated(dsn, create=False) as storage:
        return await migrate.current_revisions(storage.engine)


async def upgrade(
    dsn: str, revision: str = "head", layout: str | None = None
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Upgrade to ``revision`` (creating a missing SQLite file); the revisions before and
    after. ``layout`` (``plain`` or ``partitioned[:N]``, docs/scaling.md) is the one a new
    PostgreSQL database is created with; a database whose tables have another is refused."""
    wanted = parse_layout(layout, given_as="--layout")
    async with unmigrated(dsn) as storage:
        before = await migrate.current_revisions(storage.engine)
        await migrate.upgrade(storage.engine, revision, layout=wanted)
        return before, await migrate.current_revisions(storage.engine)


async def downgrade(dsn: str, revision: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Downgrade to ``revision`` (``base`` drops our tables); the revisions before and after.
    A missing SQLite file is ``DatabaseNotFoundError``: there is nothing to downgrade."""
    async with unmigrated(dsn, create=False) as storage:
        before = await migrate.current_revisions(storage.engine)
        await migrate.downgrade(storage.engine, revision)
        return before, await migrate.current_revisions(storage.engine)


@dataclass(frozen=True)
class ArchiveReport:
    """Reset archives that need an operator's eye.

    ``unpublished``: hidden, staged archives still in the directory: a reset in flight, or
    one a stopped process left that no start has settled (another database's, an older
    version's, or an unreadable one). ``recovered``: those this store's start settled
    after a crash (``SessionStorage.recovered_archives``).
    """

    unpublished: tuple[StagedArchive, ...] = ()
    recovered: tuple[RecoveredArchive, ...] = ()
    store_tag: str | None = None

    def as_json(self) -> dict[str, list[dict[str, object]]]:
        return {
            "unpublished": [
                {
                    "path": str(item.path),
                    "publish_as": str(item.final),
                    "bytes": item.size,
                    "this_store": item.store_tag is not None and item.store_tag == self.store_tag,
                }
                for item in self.unpublished
            ],
            "recovered": [
                {
                    "path": str(item.path),
                    "session_key": item.session_key,
                    "session_id": item.session_id,
                    "outcome": item.outcome,
                    "reason": item.reason,
                }
                for item in self.recovered
            ],
        }


@dataclass(frozen=True)
class StoreStats:
    """Row counts, and this store's reset archives: its files in ``reset_archive_directory``
    (``other_reset_archive_files``: the files there of other stores, or of older releases,
    which did not name their store) and its rows of ``session_archives``
    (``archive_store="database"``). ``reset_archive_store`` says where new ones go."""

    counts: StoreCounts
    reset_archive_directory: Path
    reset_archive_files: int
    reset_archive_bytes: int
    archives: ArchiveReport = ArchiveReport()
    reset_archive_store: str = "files"
    other_reset_archive_files: int = 0
    reset_archive_rows: int = 0
    reset_archive_row_bytes: int = 0
    # Resets that went on without their archive (it could not be written), losing the old
    # history: through this storage, in this process, since it was made.
    reset_archives_lost: int = 0


async def archive_report(
    place: ArchivePlace, recovered: tuple[RecoveredArchive, ...]
) -> ArchiveReport:
    """The reset archives of :class:`ArchiveReport` (for ``stats`` and ``repair list``):
    the staged files in ``place``'s directory now, and those the store's start settled
    (``recovered``). No unit of work: the files are read, not the database."""
    staged = await asyncio.to_thread(staged_archives, place.directory())
    return ArchiveReport(tuple(staged), recovered, place.tag)


async def collect_stats(
    uow: UnitOfWork, place: ArchivePlace, recovered: tuple[RecoveredArchive, ...], lost: int
) -> StoreStats:
    """Row counts of the store (one snapshot), plus its reset archives: its files in the
    archive directory on this machine, its ``session_archives`` rows, those its start
    ``recovered`` and the ``lost`` count of resets that went on without one."""
    async with uow.snapshot() as tx:
        counts = await tx.overview.store_counts()
        rows, row_bytes = await tx.archives.totals()
    directory = place.directory()
    found = await asyncio.to_thread(published_archives, directory, place.tag)
    return StoreStats(
        counts,
        directory,
        found.files,
        found.size,
        await archive_report(place, recovered),
        place.store,
        found.other_files,
        rows,
        row_bytes,
        lost,
    )


def revision_history() -> list[RevisionInfo]:
    """Every revision of the one migration history, newest first."""
    return migrate.history()
