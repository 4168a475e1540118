"""session-key cursor: ``idx_transcript_session_key_cursor`` on ``transcript_entries``
``(session_key, session_id, created_at, id)``

Every statement on one session's live rows carries both ``session_key`` and ``session_id``
(docs/scaling.md#keys-and-statements) and most order them by ``(created_at, id)``: the order
floor of every append and batch (the newest live ``created_at``, docs/semantics.md#order),
the pop, the tails, the pages and the transcript lines. No index led with both: the cursor
index ``(session_id, created_at, id)`` lacks the key and the primary key (PostgreSQL,
``(session_key, id)``) or ``idx_transcript_session_key`` lack the rest. With statistics that
do not know the session's size (a database never analyzed, or a long session in a table of
many short ones) PostgreSQL planned the floor as a ``BitmapAnd`` of the key's index and the
cursor index followed by a sort of every row of the generation, so each append cost O(n) in
the session's length. This index answers every such statement with one range of the index,
read forwards or backwards (the floor: one entry), whatever the statistics say; ``id``
follows ``created_at`` because the reads break ties by it.

Nothing is dropped (expand-only): ``idx_transcript_session_cursor`` still serves the reads by
``session_id`` alone (retention, the by-id resolution, SQLite's append trigger's floor) and
``idx_transcript_session_key`` SQLite's ``max(id)`` of a key (the append view's returned id);
on PostgreSQL the latter repeats the primary key's prefix.

Built online on PostgreSQL (outside any transaction, the migration lock held), an invalid
leftover of a failed build dropped first:

* plain layout: ``CREATE INDEX CONCURRENTLY``;
* partitioned layout (docs/scaling.md#the-partitioned-layout), where ``CONCURRENTLY`` cannot
  build on a partitioned parent and the tables may already hold rows: the parent's index
  created ``ON ONLY`` the parent (invalid, no rows read), each partition's built
  ``CONCURRENTLY`` and attached to it; with the last one attached PostgreSQL marks the
  parent's valid. An interrupted run leaves the parent's index invalid (``db check``
  reports it) and the next run finishes it.

SQLite: ``CREATE INDEX`` in the migration transaction (writers wait for the build). Offline
(``--sql``, an empty database): a plain ``CREATE INDEX``. Idempotent (``IF NOT EXISTS``, and
the partitions' indexes found in place are attached, not built again). Downgrade drops it.

The revision is expand-only: an older release never names the index.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import context, op
from opensquilla.session.db import layout

revision: str = "0011"
down_revision: str | Sequence[str] | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

expand_only = True

TABLE = "transcript_entries"
INDEX = "idx_transcript_session_key_cursor"
COLUMNS = ("session_key", "session_id", "created_at", "id")
# A partition's own index: ``<partition>_session_key_cursor_idx``.
PARTITION_SUFFIX = "_session_key_cursor_idx"

_COLUMN_LIST = ", ".join(COLUMNS)


def _create(name: str, table: str, *, how: str = "") -> str:
    return f"CREATE INDEX {how}IF NOT EXISTS {name} ON {table} ({_COLUMN_LIST})"


def _validity(bind: sa.engine.Connection, name: str) -> bool | None:
    """Whether the index ``name`` is valid; ``None`` when there is none."""
    return bind.scalar(
        sa.text(
            "SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
            "WHERE c.relname = :name AND pg_catalog.pg_table_is_visible(c.oid)"
        ),
        {"name": name},
    )


def _drop_if_invalid(bind: sa.engine.Connection, name: str) -> None:
    """A ``CREATE INDEX CONCURRENTLY`` that failed leaves an invalid index behind, which
    ``IF NOT EXISTS`` would keep: drop it first (revisions 0003, 0009 and 0010 do the same)."""
    if _validity(bind, name) is False:
        bind.execute(sa.text(f"DROP INDEX CONCURRENTLY IF EXISTS {name}"))


def _partitions(bind: sa.engine.Connection) -> list[str]:
    rows = bind.execute(
        sa.text(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = CAST(:table AS regclass) ORDER BY c.relname"
        ),
        {"table": TABLE},
    )
    return [str(name) for (name,) in rows]


def _build_partitioned(bind: sa.engine.Connection) -> None:
    """The parent's index ``ON ONLY`` the parent (a catalog entry, invalid until every
    partition's is attached), then each partition's built ``CONCURRENTLY`` and attached
    (autocommit: each statement its own transaction)."""
    bind.execute(sa.text(f"CREATE INDEX IF NOT EXISTS {INDEX} ON ONLY {TABLE} ({_COLUMN_LIST})"))
    for partition in _partitions(bind):
        own = partition + PARTITION_SUFFIX
        _drop_if_invalid(bind, own)
        bind.execute(sa.text(_create(own, partition, how="CONCURRENTLY ")))
        # Attaching an index already attached to this parent does nothing.
        bind.execute(sa.text(f"ALTER INDEX {INDEX} ATTACH PARTITION {own}"))


def upgrade() -> None:
    dialect = op.get_context().dialect.name
    if dialect != "postgresql" or context.is_offline_mode():
        # SQLite: in the migration transaction. A script is for an empty database: a plain
        # index, and the script stays one transaction.
        op.execute(_create(INDEX, TABLE))
        return
    if _validity(op.get_bind(), INDEX):
        return  # a replay (a partitioned parent's is valid once every partition's is attached)
    with op.get_context().autocommit_block():
        bind = op.get_bind()
        if layout.is_partitioned(bind, TABLE):
            _build_partitioned(bind)
            return
        _drop_if_invalid(bind, INDEX)
        bind.execute(sa.text(_create(INDEX, TABLE, how="CONCURRENTLY ")))


def downgrade() -> None:
    # In the migration transaction, as the revisions below (a partitioned parent's index
    # takes its partitions' with it).
    op.execute(f"DROP INDEX IF EXISTS {INDEX}")
