"""Reset archives: the old generation of a session, written before it is deleted.

One JSON file per reset, owner-only (0600) in an owner-only (0700) directory whatever the
umask. It is written and fsynced under a temporary name inside the reset transaction,
before anything is deleted, and renamed into place only once the reset has committed; a
reset that rolls back removes it. The directory is
the storage's ``archive_dir``, else ``$OPENSQUILLA_SESSION_ARCHIVE_DIR``, else the opensquilla
home's ``session-archive``, resolved at each reset (``SessionStorage.archive_directory()``).
Each file name ends with the tag of the store that wrote it (:func:`store_tag`), so that a
directory several stores share tells their archives apart (:func:`published_archives`).

A process that stops between a reset's COMMIT and that rename leaves the only copy of the
old generation under the hidden name; the store's next start settles it
(:func:`recover_staged_archives`), and ``stats`` and ``repair list`` report it.

:func:`write_archive` writes one at once, outside any reset (the manager's
``write_session_archive``): staged the same way, then published straight away.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import re
import stat
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from ..models import GenerationSnapshot
from ..support.jsontext import strict_json
from .files import CAN_LOCK, StagedFile, lock_staged, stage_file, write_private_file

# The logger keeps the name it had before the code moved: users configure it by name.
log = logging.getLogger("opensquilla.session.archive")

ARCHIVE_SCHEMA_VERSION = 1
RESET_REASON = "reset_same_key"
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def safe_name_part(value: str) -> str:
    """``value`` for a file name: runs outside ``[A-Za-z0-9_.-]`` become ``-``, dashes
    trimmed, 64 characters at most, ``session`` if nothing is left."""
    return _UNSAFE.sub("-", value).strip("-")[:64] or "session"


def archive_file_name(session_key: str, session_id: str, now_ms: int, tag: str) -> str:
    """``<now_ms>-<safe key>-<safe session id>-<uuid4, 32 hex>.<store tag>.json``: under 255
    bytes whatever the key (its staged name too), and never the same twice, even within one
    millisecond. The document inside keeps the full key."""
    return (
        f"{now_ms}-{safe_name_part(session_key)}-{safe_name_part(session_id)}-"
        f"{uuid.uuid4().hex}.{tag}.json"
    )


# The store tag of a published archive's name; names without one are from older releases.
_PUBLISHED = re.compile(r"-[0-9a-f]{32}(?:\.(?P<tag>[0-9a-f]{8}))?\.json$")


@dataclass(frozen=True)
class PublishedArchives:
    """The published archive files of a directory: this store's, and the others'."""

    files: int = 0
    size: int = 0  # bytes
    other_files: int = 0  # another store's, or untagged (written by an older release)


def published_archives(directory: Path, tag: str) -> PublishedArchives:
    """Count the archive files of the store ``tag`` in ``directory`` (and the rest)."""
    files = size = others = 0
    try:
        entries = list(os.scandir(directory))
    except (FileNotFoundError, NotADirectoryError):
        return PublishedArchives()
    for entry in entries:
        if entry.name.startswith(".") or not entry.name.endswith(".json"):
            continue
        try:
            if not entry.is_file(follow_symlinks=False):
                continue
            length = entry.stat(follow_symlinks=False).st_size
        except OSError:
            continue
        match = _PUBLISHED.search(entry.name)
        if match is not None and match.group("tag") == tag:
            files, size = files + 1, size + length
        else:
            others += 1
    return PublishedArchives(files, size, others)


def _fields(record: BaseModel) -> dict[str, Any]:
    """A record's fields as they are. Rows read back from the database hold JSON values
    only; pydantic's serialiser is not used because it refuses values nested deeper than
    its own limit, which the store accepts, and a reset must archive whatever it deletes."""
    return {name: getattr(record, name) for name in type(record).model_fields}


def archive_document(snapshot: GenerationSnapshot, *, reason: str, now_ms: int) -> dict[str, Any]:
    archived_at = datetime.fromtimestamp(now_ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "schema_version": ARCHIVE_SCHEMA_VERSION,
        "archived_at": archived_at,
        "reason": reason,
        "session_key": snapshot.session.session_key,
        "session_id": snapshot.session.session_id,
        "session": _fields(snapshot.session),
        "transcript_entries": [_fields(entry) for entry in snapshot.transcript],
        "summaries": [_fields(summary) for summary in snapshot.summaries],
    }


def archivable(snapshot: GenerationSnapshot) -> bool:
    """Whether the generation holds anything to archive (a transcript row or a summary)."""
    return bool(snapshot.transcript or snapshot.summaries)


def document_text(document: dict[str, Any]) -> str:
    """Indented, strict JSON (``jsontext``): never a bare ``NaN``, every control character
    escaped, and no depth limit, so that nothing the database holds is ever unarchivable."""
    return strict_json(document)


def encode_document(document: dict[str, Any]) -> bytes:
    """:func:`document_text` in UTF-8, as the file holds it."""
    return document_text(document).encode("utf-8")


def _prepare(
    snapshot: GenerationSnapshot, now_ms: int, reason: str, tag: str
) -> tuple[str, dict[str, Any]] | None:
    """The file name and document of ``snapshot``'s archive; ``None`` when it held nothing."""
    if not archivable(snapshot):
        return None
    session = snapshot.session
    return (
        archive_file_name(session.session_key, session.session_id, now_ms, tag),
        archive_document(snapshot, reason=reason, now_ms=now_ms),
    )


def _write(directory: Path, name: str, document: dict[str, Any]) -> Path:
    return write_private_file(directory, name, encode_document(document))


def _stage(directory: Path, name: str, document: dict[str, Any], tag: str) -> StagedFile:
    # On a worker thread: a fresh stack for the encoder, and the event loop stays free.
    staged = stage_file(directory, name, encode_document(document))
    staged.label(tag)
    return staged


def _discard_when_done(staging: asyncio.Future[StagedFile]) -> None:
    if not staging.cancelled() and staging.exception() is None:
        staging.result().discard()


async def stage_reset_archive(
    snapshot: GenerationSnapshot,
    *,
    directory: Path,
    now_ms: int,
    store_tag: str,
    reason: str = RESET_REASON,
) -> StagedFile | None:
    """Write the archive of ``snapshot`` in ``directory`` under a temporary name (fsynced,
    owner-only); ``None`` when the generation held nothing. Publish it once the reset has
    committed.

    ``store_tag`` (:func:`store_tag`) names the database the reset runs on; both names carry
    it: the temporary one, so that after a crash only that database's next start settles the
    file, and the published one, so that ``stats`` counts only that database's archives.
    """
    prepared = _prepare(snapshot, now_ms, reason, store_tag)
    if prepared is None:
        return None
    name, document = prepared
    staging = asyncio.ensure_future(asyncio.to_thread(_stage, directory, name, document, store_tag))
    try:
        return await asyncio.shield(staging)
    except BaseException:
        # Cancelled while the thread writes: the thread finishes regardless, and nobody
        # will publish or discard what it leaves, so remove it once it is there.
        staging.add_done_callback(_discard_when_done)
        raise


async def write_archive(
    snapshot: GenerationSnapshot,
    *,
    directory: Path,
    now_ms: int,
    store_tag: str,
    reason: str = RESET_REASON,
) -> Path | None:
    """Write the archive of ``snapshot`` in ``directory`` and publish it at once (staged,
    fsynced, renamed, directory fsynced); ``None`` when the generation held nothing. Any
    failure removes the temporary file and raises. Cancelled, the write still completes on
    its thread."""
    prepared = _prepare(snapshot, now_ms, reason, store_tag)
    if prepared is None:
        return None
    name, document = prepared
    return await asyncio.to_thread(_write, directory, name, document)


# -- recovery: archives a crash left staged -----------------------------------------------

# ".<final name>.<32 hex>[.<store tag>].tmp" (files.stage_file, StagedFile.label): with a
# tag, staged by a store that can settle it after a crash.
_STAGED = re.compile(r"^\.(?P<final>.+\.json)\.[0-9a-f]{32}(?:\.(?P<tag>[0-9a-f]{8}))?\.tmp$")
# A staged file that does not parse is one whose writer died while writing it (the reset
# commits only after the file is complete and fsynced). Its writer is surely gone after this
# long; before that it may be a writer that has created the file and not yet locked it.
INCOMPLETE_GRACE_SECONDS = 600.0

Outcome = Literal["published", "discarded"]


def store_tag(identity: str) -> str:
    """A short, stable name for one database (``identity``: its file or server and name)."""
    return hashlib.sha256(identity.encode("utf-8", "surrogatepass")).hexdigest()[:8]


@dataclass(frozen=True)
class StagedArchive:
    """A hidden, unpublished reset archive in the archive directory."""

    path: Path
    final: Path
    store_tag: str | None  # None: staged by a store that cannot settle it (or older code)
    size: int
    modified: float  # seconds since the epoch


@dataclass(frozen=True)
class RecoveredArchive:
    """What a store's start did with an archive a crash left staged."""

    path: Path  # where it is now: the published file, or the temporary name it had
    session_key: str
    session_id: str
    outcome: Outcome
    reason: str


def staged_archives(directory: Path) -> list[StagedArchive]:
    """Every unpublished reset archive in ``directory`` (name order)."""
    found: list[StagedArchive] = []
    try:
        entries = sorted(os.scandir(directory), key=lambda entry: entry.name)
    except (FileNotFoundError, NotADirectoryError):
        return found
    for entry in entries:
        match = _STAGED.match(entry.name)
        if match is None:
            continue
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if not stat.S_ISREG(info.st_mode):
            continue
        found.append(
            StagedArchive(
                path=Path(entry.path),
                final=directory / match.group("final"),
                store_tag=match.group("tag"),
                size=info.st_size,
                modified=info.st_mtime,
            )
        )
    return found


def _read_identity(file: StagedFile) -> tuple[str, str] | None:
    """``(session_key, session_id)`` of a complete staged archive, ``None`` if incomplete."""
    try:
        document = json.loads(file.temporary.read_bytes())
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(document, dict):
        return None
    key, session_id = document.get("session_key"), document.get("session_id")
    if not isinstance(key, str) or not isinstance(session_id, str):
        return None
    return key, session_id


async def recover_staged_archives(
    directory: Path,
    tag: str,
    current_generation: Callable[[str], Awaitable[str | None]],
    *,
    now: float | None = None,
) -> list[RecoveredArchive]:
    """Settle the archives that a crash left staged for the store ``tag``.

    A reset stages its archive inside its transaction and publishes it after the COMMIT;
    a process that died in between left the only copy of the old generation under a
    hidden name. The database says what happened: if the archived generation
    (``session_id``) is still the session's current one (``current_generation(key)``),
    the reset never committed and the file is a stale copy of rows that are still there:
    it is discarded. Otherwise the reset committed (or the session has since gone) and
    the file is published under its final name. Files some live process still holds
    (a reset in flight), files of other stores, and files in doubt are left alone.
    """
    settled: list[RecoveredArchive] = []
    now = time.time() if now is None else now
    for staged in await asyncio.to_thread(staged_archives, directory):
        if staged.store_tag != tag:
            continue
        if not CAN_LOCK and now - staged.modified < INCOMPLETE_GRACE_SECONDS:
            continue  # no lock tells a reset still in flight: only an old file is settled
        file = await asyncio.to_thread(lock_staged, staged.path, staged.final)
        if file is None:
            continue  # a reset in flight holds it, or it is gone already
        try:
            identity = await asyncio.to_thread(_read_identity, file)
            if identity is None:
                if now - staged.modified >= INCOMPLETE_GRACE_SECONDS:
                    await asyncio.to_thread(file.discard)
                    log.warning(
                        "discarded %s: an archive whose writer died before finishing it "
                        "(its reset never committed)",
                        staged.path,
                        extra={"operation": "recover_archives"},
                    )
                continue
            key, session_id = identity
            current = await current_generation(key)
            if current == session_id:
                await asyncio.to_thread(file.discard)
                settled.append(
                    RecoveredArchive(
                        staged.path,
                        key,
                        session_id,
                        "discarded",
                        "its reset did not commit: the generation is still the session's",
                    )
                )
            else:
                path = await asyncio.to_thread(file.publish)
                settled.append(
                    RecoveredArchive(
                        path,
                        key,
                        session_id,
                        "published",
                        "its reset committed before the process stopped"
                        if current is not None
                        else "its session has been deleted since",
                    )
                )
            log.warning(
                "reset archive of %s (%s) left staged by a stopped process: %s (%s)",
                key,
                session_id,
                settled[-1].outcome,
                settled[-1].path,
                extra={"session_key": key, "operation": "recover_archives"},
            )
        finally:
            file.release()
    return settled
