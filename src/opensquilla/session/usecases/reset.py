"""Reset: a new generation of a session key, with the old one archived to a file, or to a
row of ``session_archives`` (docs/semantics.md#reset and #reset-archive).

One write transaction (one unit of work), which reads and locks the row it renews (a caller
holding a generation may make it a compare-and-set on session id and epoch): the epoch
bump, identity rotation and counter reset, deletion of the old generation's transcript,
compacted archive and summaries, and invalidation of the key's context states. Inside it,
before anything is deleted, the old generation (read in the same transaction, so exactly
what is deleted) is written to an archive file under a temporary name and fsynced; after
the commit the file is renamed into place, and if the transaction rolls back it is removed.
A failed archive write is logged and the reset goes on, as the contract requires.

With ``archive_required`` (upstream HEAD's behaviour, opt-in) an archive that cannot be
written is an :class:`ArchiveWriteError` that rolls the reset back, and the file is renamed
into place inside the transaction, as its last step, so that a failed rename rolls it back
too; a COMMIT that then fails removes the published file again when the row shows the old
generation.

With ``SessionStorage(..., archive_store="database")`` the archive is a row inserted in the
reset transaction itself, before anything is deleted: it commits with the reset or not at
all, so there is nothing to stage, publish or settle.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..db.generations import generation_guard
from ..db.uow import Transaction, UnitOfWork
from ..errors import ArchiveWriteError, SessionNotFoundError, StaleEpochError
from ..fs.archive_place import ArchivePlace
from ..fs.files import StagedFile
from ..fs.reset_archive import archivable, stage_reset_archive
from ..keys import CanonicalKey
from ..models import CANONICAL_FORK_PROOF_SCHEMA_VERSION, GenerationSnapshot, SessionNode
from ..models.reports import DeletionPreview, ResetReport
from ..support.clock import new_session_id, now_ms
from .generations import GenerationCache
from .session_archive import archive_text, insert_archive, read_generation

# The logger keeps the name it had before the code moved: users configure it by name.
log = logging.getLogger("opensquilla.session.manager")

_SETTLE_READS = 3


@dataclass
class ResetArchive:
    """Where the reset transaction puts the old generation's archive (``place``), and where
    it put it: a staged file (for the caller to publish or settle), or the id of its
    ``session_archives`` row."""

    place: ArchivePlace
    staged: list[StagedFile] = field(default_factory=list)
    stored_id: int | None = None
    error: str | None = None  # why the archive could not be written (the reset went on)


def reset_values(epoch: int, session_id: str, now: int) -> dict[str, object]:
    """What a reset changes on the session row: a new identity, zero counters, the
    collaboration mode back to ``default`` with no active plan (the model routing mode and
    its revision are kept)."""
    return {
        "epoch": epoch,
        "session_id": session_id,
        "updated_at": now,
        "input_tokens": 0,
        "output_tokens": 0,
        "total_tokens": 0,
        "total_tokens_fresh": False,
        "estimated_cost_usd": 0.0,
        "total_cost_usd": 0.0,
        "billed_cost_usd": 0.0,
        "estimated_cost_component_usd": 0.0,
        "cost_source": "none",
        "missing_cost_entries": 0,
        "cache_read": 0,
        "cache_write": 0,
        "context_tokens": None,
        "compaction_count": 0,
        "collaboration_mode": "default",
        "collaboration_revision": 0,
        "active_plan_revision_id": None,
    }


def next_generation_values(current: SessionNode, session_id: str, now: int) -> dict[str, object]:
    """What a reset of ``current`` writes on its row (:func:`reset_values` at the next epoch,
    generation ``session_id``); a forked row's new generation is empty, so complete: proven
    (``schema_version`` at least ``CANONICAL_FORK_PROOF_SCHEMA_VERSION``), whatever the fork
    was."""
    values = reset_values(current.epoch + 1, session_id, now)
    if current.forked_from_parent:
        values["schema_version"] = max(current.schema_version, CANONICAL_FORK_PROOF_SCHEMA_VERSION)
    return values


async def start_generation(
    uow: UnitOfWork,
    key: CanonicalKey,
    *,
    expected_session_id: str | None = None,
    expected_epoch: int | None = None,
    new_session_id: str,
    now: int,
    archive: ResetArchive | None = None,
    archive_required: bool = False,
    generated_id: bool = False,
) -> tuple[SessionNode, SessionNode]:
    """The reset transaction, one unit of work: the row read and locked, then the new
    generation; the old row and the new one. With ``expected_session_id`` and
    ``expected_epoch``, a compare-and-set on them (``StaleEpochError`` if another writer
    got there first); without, the generation found is the one renewed (a missing row:
    ``SessionNotFoundError``).

    With ``archive``, the old generation (as this transaction sees it, so exactly what is
    deleted) is archived before anything is deleted: in the database store as a row of
    this transaction (``archive.stored_id``); else as a file under a temporary name,
    appended to ``archive.staged``, which the caller publishes or settles. With
    ``archive_required`` too, a failed write raises :class:`ArchiveWriteError` (nothing
    changes) and the file is published before the COMMIT (the caller settles it if the
    COMMIT fails).

    ``generated_id``: the store has just generated ``new_session_id`` (a ``uuid4``, new
    everywhere by the rule that keeps session ids unique under distribution,
    docs/scaling.md#keys-and-statements), so the claim check, a lookup of the id in every
    table that fans out to every shard, is not made; an id from anywhere else is checked.
    """
    async with generation_guard(uow, new_session_id, None), uow.write() as tx:
        current = await tx.sessions.get(key, lock="update")
        if expected_session_id is None:
            if current is None:
                raise SessionNotFoundError(f"Session not found: {key}")
            expected_session_id, expected_epoch = current.session_id, current.epoch
        if (
            current is None
            or current.session_id != expected_session_id
            or current.epoch != expected_epoch
        ):
            raise StaleEpochError(
                f"Epoch mismatch for {key}: expected generation {expected_session_id} at "
                f"epoch {expected_epoch}, got "
                + (f"{current.session_id} at epoch {current.epoch}" if current else "None")
            )
        # The new id must be new everywhere (the current one included): the archive
        # recovery tells a committed reset by the session's id having changed.
        if not generated_id:
            await tx.sessions.claim_generation(new_session_id, None)
        old_id = current.session_id
        values = next_generation_values(current, new_session_id, now)
        renewed = await tx.sessions.update_fields(key, values)
        assert renewed is not None
        if archive is not None:
            snapshot = await _old_generation(tx, current)
            if archive.place.store == "database":
                archive.stored_id = await _store_archive(
                    tx, snapshot, archive, required=archive_required
                )
            else:
                file = await _stage_archive(snapshot, archive, required=archive_required)
                if file is not None:
                    archive.staged.append(file)
        await tx.transcript.delete_all(old_id, session_key=current.session_key)
        await tx.summaries.delete_for_session(old_id, session_key=current.session_key)
        await tx.states.invalidate(key, reason="session_reset")
        # The new generation's state is empty, at a revision a read before the reset never
        # showed (docs/state.md#reset-and-fork).
        await tx.session_states.restart(
            key, old_session_id=old_id, new_session_id=new_session_id, now=now
        )
        if archive_required and archive is not None and archive.staged:
            await _publish_required(archive.staged, current)
    return current, renewed


async def _old_generation(tx: Transaction, old: SessionNode) -> GenerationSnapshot:
    """The old generation as this transaction sees it (so exactly what is deleted), its
    row with the bumped epoch."""
    transcript, summaries = await read_generation(tx, old.session_id, old.session_key)
    return GenerationSnapshot(
        session=old.model_copy(update={"epoch": old.epoch + 1}),
        transcript=transcript,
        summaries=summaries,
    )


def _archive_failed(
    exc: Exception, old: SessionNode, archive: ResetArchive, *, required: bool
) -> None:
    """A failed archive write refuses the reset if ``required``; else the reset goes on and
    the old generation's history is lost: logged at ERROR with the key and the reason, and
    the reason kept in ``archive.error`` for the reset report (and the store's count)."""
    reason = f"{type(exc).__name__}: {exc}"
    if required:
        raise ArchiveWriteError(
            f"reset of {old.session_key} refused: the archive of its generation "
            f"{old.session_id} could not be written ({reason}); nothing was changed"
        ) from exc
    archive.error = reason
    log.error(
        "reset archive for %s (generation %s) could not be written (%s); the reset goes on "
        "and the old generation's history is lost (SessionManager(archive_required=True) "
        "refuses such a reset instead)",
        old.session_key,
        old.session_id,
        reason,
        exc_info=True,
        extra={"session_key": old.session_key, "operation": "reset"},
    )


async def _stage_archive(
    snapshot: GenerationSnapshot, archive: ResetArchive, *, required: bool
) -> StagedFile | None:
    """Write the old generation under a temporary name (see :func:`_archive_failed`)."""
    place = archive.place
    try:
        return await stage_reset_archive(
            snapshot, directory=place.directory(), now_ms=now_ms(), store_tag=place.tag
        )
    except Exception as exc:
        _archive_failed(exc, snapshot.session, archive, required=required)
        return None


async def _store_archive(
    tx: Transaction, snapshot: GenerationSnapshot, archive: ResetArchive, *, required: bool
) -> int | None:
    """Insert the old generation's archive in this transaction; ``None`` when it held
    nothing, or when its document could not be encoded (see :func:`_archive_failed`). A
    failed INSERT is the transaction's failure: the reset rolls back with it."""
    if not archivable(snapshot):
        return None
    now = now_ms()
    try:
        text = await archive_text(snapshot, now)
    except Exception as exc:
        _archive_failed(exc, snapshot.session, archive, required=required)
        return None
    return await insert_archive(tx, snapshot, text, now)


async def _publish_required(staged: list[StagedFile], old: SessionNode) -> None:
    """Rename the archives into place inside the reset transaction: a failure rolls the
    reset back (``archive_required``)."""
    for file in staged:
        try:
            await asyncio.to_thread(file.publish)
        except OSError as exc:
            raise ArchiveWriteError(
                f"reset of {old.session_key} refused: the archive of its generation "
                f"{old.session_id} could not be published ({exc}); nothing was changed"
            ) from exc


class Resets:
    """Resetting sessions, with their archives staged, published or settled.

    A reset is one unit of work (the row read, locked and renewed in one transaction);
    after a failure that may have committed, settling its staged archive reads the row in
    units of its own. ``archive_required``: a reset whose archive cannot be written raises
    :class:`ArchiveWriteError` and changes nothing (upstream HEAD); by default the failure
    is logged and the reset goes on (the contract), and ``archive_lost`` is called.
    """

    def __init__(
        self,
        generations: GenerationCache,
        place: ArchivePlace,
        *,
        archive_required: bool,
        archive_lost: Callable[[], None],
    ) -> None:
        self._generations = generations
        self._place = place
        self._archive_required = archive_required
        self._archive_lost = archive_lost

    async def reset(self, uow: UnitOfWork, key: CanonicalKey) -> ResetReport:
        """Start a new generation of ``key`` (its current one, read in the reset's own
        transaction)."""
        archive = ResetArchive(self._place)
        staged = archive.staged
        renewed_id = new_session_id()
        try:
            old, renewed = await start_generation(
                uow,
                key,
                new_session_id=renewed_id,
                now=now_ms(),
                archive=archive,
                archive_required=self._archive_required,
                generated_id=True,
            )
        except SessionNotFoundError:
            self._generations.forget(key)
            raise
        except BaseException:
            if staged:
                await _settle_archive(uow, staged, key, renewed_id)
            raise
        # Committed: the archive is renamed into place even if this task is cancelled
        # now (the shielded rename runs to its end; the cancellation still propagates).
        path = await asyncio.shield(_publish_all(staged, key))
        if archive.error is not None:
            self._archive_lost()
        return ResetReport(
            self._generations.remember(renewed),
            old.session_id,
            path,
            archive.stored_id,
            archive.error,
        )


async def _settle_archive(
    uow: UnitOfWork, staged: list[StagedFile], key: str, renewed_id: str
) -> None:
    """After a reset raised, keep its staged archive exactly when the reset committed.

    A cancellation or a lost connection can arrive while the COMMIT is already on its
    way; then the old generation is gone from the database and the archive is its only
    copy. So the row decides: the new identity means publish, the old one means discard,
    and no answer means keep the staged file where it is.
    """
    committed: bool | None = None
    # The first read may meet the connection the cancellation is still tearing
    # down; a few tries, before the outcome is declared unknown.
    for attempt in range(_SETTLE_READS):
        try:
            row = await asyncio.shield(_current_row(uow, key))
        except Exception:
            log.debug("reading %s to settle its reset archive failed", key, exc_info=True)
            await asyncio.sleep(0.05 * (attempt + 1))
            continue
        committed = row is not None and row.session_id == renewed_id
        break
    for file in staged:
        if committed is None:
            # Unlocked, so that the next start of the store settles it (publishes it
            # if the reset committed after all, discards it if not).
            file.release()
            log.warning(
                "reset of %s failed and its outcome is unknown; its archive is kept at %s",
                key,
                file.path,
                extra={"session_key": key, "operation": "reset"},
            )
        elif committed:
            await asyncio.shield(_publish_archive(file, key))
        else:
            await asyncio.to_thread(file.discard)


async def preview(uow: UnitOfWork, key: CanonicalKey) -> DeletionPreview:
    """What a reset would delete (and invalidate) now; nothing is changed."""
    async with uow.snapshot() as tx:
        node = await tx.sessions.get(key)
        if node is None:
            raise SessionNotFoundError(f"Session not found: {key}")
        return await tx.overview.preview_reset(key, node.session_id)


async def _current_row(uow: UnitOfWork, key: str) -> SessionNode | None:
    async with uow.read() as tx:
        return await tx.sessions.get(key)


async def _publish_all(staged: list[StagedFile], key: str) -> Path | None:
    path = None
    for file in staged:
        path = await _publish_archive(file, key)
    return path


async def _publish_archive(file: StagedFile, key: str) -> Path | None:
    try:
        path = await asyncio.to_thread(file.publish)
    except OSError:  # publish() has unlocked it: the store's next start retries
        log.warning(
            "reset archive %s could not be renamed into place; it is kept under that name",
            file.temporary,
            exc_info=True,
            extra={"session_key": key, "operation": "reset"},
        )
        return file.path
    log.info(
        "archived the previous generation of %s to %s",
        key,
        path,
        extra={"session_key": key, "operation": "reset"},
    )
    return path
