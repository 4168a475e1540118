"""Whole sessions as raw rows, read and written for export, import and copy.

Transfer moves sessions exactly as stored (ids, every generation, legacy keys as they are),
so it works below the manager: each method here opens the unit of work it needs on the
store (``storage.uow``) and uses the row repository (``db/repos/transfer.py``). This is
the only module of the package that touches the storage.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

from ..db.generations import generation_guard
from ..db.repos.transfer import table_layout
from ..db.routing import cross_session
from ..db.tables import CHILD_TABLES
from ..errors import SessionExistsError
from ..models.reports import IfExists, SessionRows, TableLayout
from ..storage import SessionStorage

DEFAULT_BATCH = 100


def ordered(keys: Sequence[str]) -> list[str]:
    """Keys in code-point order (the same on every backend, whatever its collation)."""
    return sorted(set(keys))


def batches(items: Sequence[str], size: int) -> Iterator[list[str]]:
    """``items`` in consecutive lists of ``size`` (at least one): each batch of sessions is
    read from one snapshot."""
    step = max(1, size)
    for start in range(0, len(items), step):
        yield list(items[start : start + step])


class TransferStore:
    """One store as transfer uses it: the source or the target of a move, for one
    cross-session ``operation`` (``export``, ``import`` or ``copy``: what its statements
    about many sessions run as, docs/scaling.md#keys-and-statements)."""

    def __init__(self, storage: SessionStorage, *, operation: str) -> None:
        self._storage = storage
        self._operation = operation

    @property
    def database_file(self) -> Path | None:
        """The SQLite database file behind the store (``None`` for a server): an export
        must never overwrite it."""
        return self._storage.target.path

    def layout(self) -> TableLayout:
        """Every table's columns, in order, with the kind of value each holds."""
        return table_layout()

    async def all_keys(self) -> list[str]:
        """Every session key, in code-point order."""
        async with self._storage.uow.read() as tx:
            return ordered(await tx.rows.all_session_keys())

    async def existing(self, session_keys: Sequence[str]) -> set[str]:
        """Which of these keys (as given, not canonicalised) have a session row."""
        async with self._storage.uow.read() as tx:
            return await tx.rows.existing_keys(list(session_keys))

    async def read(self, session_keys: Sequence[str]) -> list[SessionRows]:
        """Whole sessions with every column of every row they own, from one snapshot.

        Keys are used as given (legacy keys need not be canonical); missing ones are left
        out. Child rows are those whose ``session_key`` is the session's, every generation.
        """
        async with self._storage.uow.snapshot() as tx:
            return await tx.rows.read_rows(list(session_keys))

    async def insert(self, rows: SessionRows, *, if_exists: IfExists = "skip") -> bool:
        """Insert a whole session exactly as given, ids included, in one transaction.

        A key that is already taken: ``False`` (``if_exists="skip"``) or
        ``SessionExistsError`` (``"fail"``); nothing is written either way. On Postgres the
        id sequences are advanced past the inserted ids in the same transaction.

        Every session id the block carries (its session's and its rows') must be free for
        its key: one another key holds is refused (``SessionIdInUseError``), or the rows
        would land in, and later be deleted with, that other session.
        """
        uow = self._storage.uow
        session_id = rows.session.get("session_id")
        async with generation_guard(uow, session_id, rows.session_key), uow.write() as tx:
            if not await tx.rows.insert_session(rows.session):
                if if_exists == "skip":
                    return False
                raise SessionExistsError(f"Session already exists: {rows.session_key}")
            carried = {session_id} | {
                row.get("session_id") for table in CHILD_TABLES for row in rows.rows(table)
            }
            for carried_id in sorted(i for i in carried if isinstance(i, str)):
                await tx.sessions.claim_generation(carried_id, rows.session_key)
            filled = await tx.rows.insert_children(rows)
            with cross_session(self._operation):  # past the largest id of the whole table
                await tx.rows.advance_sequences(filled)
        return True

    async def generation_holders(self, session_ids: Sequence[str]) -> dict[str, set[str]]:
        """For each of these session ids in use, the keys holding it (a session's current
        generation, or rows stored under a key): import and copy check before writing."""
        async with self._storage.uow.read() as tx:
            return await tx.rows.generation_holders(list(session_ids))

    async def row_ids_in_use(self, table: str, ids: Sequence[int]) -> dict[int, str]:
        """Which of these ids the child ``table`` already holds, each with the key its row
        is stored under: import and copy keep ids, so they check before writing."""
        async with self._storage.uow.read() as tx:
            return await tx.rows.ids_in_use(table, list(ids))
