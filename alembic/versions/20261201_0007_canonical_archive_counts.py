"""canonical archive counts: the coverage evidence kept by the database itself

``canonical_archive_counts`` holds one row per ``(session_id, compaction_id)`` group of
``compacted_transcript_entries`` (``compaction_id`` NULL is a group of its own): how many
archived rows the group has (``archived``) and how many of them lack ``original_entry_id``
(``unlinked``). The canonical-transcript coverage (docs/semantics.md#pages) reads its ``A``,
``N`` and each summary's count of archived rows from here, so a coverage read costs one probe
per summary instead of a count of every archived row of the generation.

Triggers on the archive keep the rows exact whoever writes it (this store, an older release
of it, the older raw-SQL store in an adopted SQLite file, an import, a copy, a hand-written
``DELETE``); the store itself never writes the table:

* SQLite: row-level ``AFTER INSERT``, ``AFTER DELETE`` and ``AFTER UPDATE OF session_id,
  compaction_id, original_entry_id`` triggers. The NULL group is matched with ``IS``; a row is
  updated, or created when the ``UPDATE`` found none (``INSERT ... SELECT ... WHERE
  changes() = 0``; no UPSERT, so any SQLite that opens the file can parse the triggers),
  and deleted when its count reaches zero.
* PostgreSQL: statement-level triggers with transition tables (``REFERENCING NEW TABLE`` /
  ``OLD TABLE``, ``FOR EACH STATEMENT``), one function: each statement applies its grouped
  difference in one ``INSERT ... ON CONFLICT DO UPDATE SET archived = archived + excluded``
  (a compaction archiving thousands of rows updates its counter row once, not once per row;
  two transactions adding to one group both count, and groups are written in key order, so
  two statements never lock each other's rows in opposite orders), then deletes the
  session's rows that reached zero. Sessions written by different transactions never share a
  row. An ``UPDATE`` that changes none of the three columns nets to nothing and writes
  nothing. ``TRUNCATE`` of the archive empties the table. The function carries the
  migration's ``search_path`` (``SET search_path FROM CURRENT``), so a client whose path does
  not name the store's schema still finds the table.

Both backends: a unique index on ``(session_id, compaction_id)`` and a partial one on
``(session_id) WHERE compaction_id IS NULL`` (unique indexes treat NULLs as distinct), so
the database itself holds one row per group.

The upgrade creates the table and the triggers, then fills the table from the archive with
one grouped ``INSERT ... SELECT`` in the same transaction (every step is repeated safely by a
replay: the rows are recomputed). On PostgreSQL ``CREATE TRIGGER`` locks the archive against
writes until the migration commits, so no archive write falls between the triggers and the
backfill; only compactions, resets, forks, imports and deletions write the archive (appends
write the live table and are not held up). On SQLite the whole run is one ``BEGIN
IMMEDIATE`` transaction. Seconds per million archived rows.

The table is derived state, not session data: it is not one of the five tables, is not
exported, and the drift check does not compare it.

The revision is expand-only: a release without it never reads the table, and its archive
writes keep it exact through the triggers. Downgrade drops the triggers, the function and
the table.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

# ruff: noqa: S608 (the names are this file's constants)

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import context, op

revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

expand_only = True

TABLE = "canonical_archive_counts"
ARCHIVE = "compacted_transcript_entries"
GROUP_INDEX = "uq_canonical_archive_counts_group"
UNFILED_INDEX = "uq_canonical_archive_counts_unfiled"  # the compaction_id NULL group
FUNCTION = "opensquilla_canonical_archive_counts"
ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

# -- SQLite: row-level triggers ------------------------------------------------------------


def _sqlite_remove(row: str) -> str:
    group = f"session_id = {row}.session_id AND compaction_id IS {row}.compaction_id"
    return f"""UPDATE {TABLE}
    SET archived = archived - 1, unlinked = unlinked - ({row}.original_entry_id IS NULL)
    WHERE {group};
    DELETE FROM {TABLE} WHERE {group} AND archived = 0 AND unlinked = 0;"""


def _sqlite_add(row: str) -> str:
    group = f"session_id = {row}.session_id AND compaction_id IS {row}.compaction_id"
    # The UPDATE first and the INSERT only when it found no row (``changes()`` is the
    # trigger's previous statement's count): one probe per archived row in the common case,
    # about half the cost of inserting-if-absent and then updating.
    unlinked = f"({row}.original_entry_id IS NULL)"
    return f"""UPDATE {TABLE}
    SET archived = archived + 1, unlinked = unlinked + {unlinked}
    WHERE {group};
    INSERT INTO {TABLE} (session_id, compaction_id, archived, unlinked)
    SELECT {row}.session_id, {row}.compaction_id, 1, {unlinked}
    WHERE changes() = 0;"""


SQLITE_TRIGGERS = {
    f"{TABLE}_ai": f"""CREATE TRIGGER {TABLE}_ai AFTER INSERT ON {ARCHIVE} BEGIN
    {_sqlite_add("new")}
END""",
    f"{TABLE}_ad": f"""CREATE TRIGGER {TABLE}_ad AFTER DELETE ON {ARCHIVE} BEGIN
    {_sqlite_remove("old")}
END""",
    f"{TABLE}_au": f"""CREATE TRIGGER {TABLE}_au
AFTER UPDATE OF session_id, compaction_id, original_entry_id ON {ARCHIVE} BEGIN
    {_sqlite_remove("old")}
    {_sqlite_add("new")}
END""",
}

# -- PostgreSQL: statement-level triggers with transition tables ---------------------------


def _pg_delta(*sides: tuple[str, int]) -> str:
    """The grouped difference the rows of ``sides`` (transition table, +1 or -1) make."""
    rows = " UNION ALL ".join(
        f"SELECT session_id, compaction_id, {sign} AS archived, "
        f"CASE WHEN original_entry_id IS NULL THEN {sign} ELSE 0 END AS unlinked FROM {name}"
        for name, sign in sides
    )
    return (
        "WITH delta AS MATERIALIZED ("
        "SELECT session_id, compaction_id, sum(archived) AS archived, "
        f"sum(unlinked) AS unlinked FROM ({rows}) AS changed "
        "GROUP BY session_id, compaction_id "
        "HAVING sum(archived) <> 0 OR sum(unlinked) <> 0), "
        f"filed AS (INSERT INTO {TABLE} AS c (session_id, compaction_id, archived, unlinked) "
        "SELECT session_id, compaction_id, archived, unlinked FROM delta "
        "WHERE compaction_id IS NOT NULL ORDER BY session_id, compaction_id "
        "ON CONFLICT (session_id, compaction_id) DO UPDATE "
        "SET archived = c.archived + excluded.archived, "
        "unlinked = c.unlinked + excluded.unlinked) "
        f"INSERT INTO {TABLE} AS c (session_id, compaction_id, archived, unlinked) "
        "SELECT session_id, compaction_id, archived, unlinked FROM delta "
        "WHERE compaction_id IS NULL ORDER BY session_id "
        "ON CONFLICT (session_id) WHERE compaction_id IS NULL DO UPDATE "
        "SET archived = c.archived + excluded.archived, "
        "unlinked = c.unlinked + excluded.unlinked;"
    )


def _pg_emptied(old: str) -> str:
    return (
        f"DELETE FROM {TABLE} WHERE archived = 0 AND unlinked = 0 "
        f"AND session_id IN (SELECT session_id FROM {old});"
    )


PG_FUNCTION = f"""CREATE OR REPLACE FUNCTION {FUNCTION}() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        {_pg_delta(("added", 1))}
    ELSIF TG_OP = 'DELETE' THEN
        {_pg_delta(("removed", -1))}
        {_pg_emptied("removed")}
    ELSIF TG_OP = 'UPDATE' THEN
        {_pg_delta(("added", 1), ("removed", -1))}
        {_pg_emptied("removed")}
    ELSE
        DELETE FROM {TABLE};
    END IF;
    RETURN NULL;
END
$$"""

PG_TRIGGERS = {
    f"{TABLE}_insert": "AFTER INSERT ON {archive} REFERENCING NEW TABLE AS added",
    f"{TABLE}_delete": "AFTER DELETE ON {archive} REFERENCING OLD TABLE AS removed",
    f"{TABLE}_update": (
        "AFTER UPDATE ON {archive} REFERENCING OLD TABLE AS removed NEW TABLE AS added"
    ),
    f"{TABLE}_truncate": "AFTER TRUNCATE ON {archive}",
}

BACKFILL = (
    f"INSERT INTO {TABLE} (session_id, compaction_id, archived, unlinked) "
    "SELECT session_id, compaction_id, count(*), "
    "sum(CASE WHEN original_entry_id IS NULL THEN 1 ELSE 0 END) "
    f"FROM {ARCHIVE} GROUP BY session_id, compaction_id"
)


def upgrade() -> None:
    postgres = op.get_context().dialect.name == "postgresql"
    # Idempotent, as every revision: a database whose version row was lost replays it.
    inspector = None if context.is_offline_mode() else sa.inspect(op.get_bind())
    if (
        inspector is not None
        and inspector.has_table(TABLE)
        and "session_key" in {column["name"] for column in inspector.get_columns(TABLE)}
    ):
        # Revision 0010's keyed table (a replay, or a partitioned database created keyed):
        # its triggers and counts are 0010's, which replays after this one.
        return
    if inspector is None or not inspector.has_table(TABLE):
        op.create_table(
            TABLE,
            sa.Column("id", ID, primary_key=True, autoincrement=True),
            sa.Column("session_id", sa.Text(), nullable=False),
            sa.Column("compaction_id", sa.Text(), nullable=True),
            sa.Column("archived", sa.BigInteger(), nullable=False),
            sa.Column("unlinked", sa.BigInteger(), nullable=False),
        )
        op.create_index(GROUP_INDEX, TABLE, ["session_id", "compaction_id"], unique=True)
        unfiled = sa.text("compaction_id IS NULL")
        op.create_index(
            UNFILED_INDEX,
            TABLE,
            ["session_id"],
            unique=True,
            sqlite_where=unfiled,
            postgresql_where=unfiled,
        )
    # The triggers first: from here on (PostgreSQL: the archive locked against writers until
    # the commit; SQLite: the one write transaction) no archive write escapes the counts.
    if postgres:
        op.execute(PG_FUNCTION)
        for name, event in PG_TRIGGERS.items():
            op.execute(f"DROP TRIGGER IF EXISTS {name} ON {ARCHIVE}")
            op.execute(
                f"CREATE TRIGGER {name} {event.format(archive=ARCHIVE)} "
                f"FOR EACH STATEMENT EXECUTE FUNCTION {FUNCTION}()"
            )
    else:
        for name, ddl in SQLITE_TRIGGERS.items():
            op.execute(f"DROP TRIGGER IF EXISTS {name}")
            op.execute(ddl)
    op.execute(f"DELETE FROM {TABLE}")
    op.execute(BACKFILL)


def downgrade() -> None:
    if op.get_context().dialect.name == "postgresql":
        for name in PG_TRIGGERS:
            op.execute(f"DROP TRIGGER IF EXISTS {name} ON {ARCHIVE}")
        op.execute(f"DROP FUNCTION IF EXISTS {FUNCTION}()")
    else:
        for name in SQLITE_TRIGGERS:
            op.execute(f"DROP TRIGGER IF EXISTS {name}")
    op.execute(f"DROP TABLE IF EXISTS {TABLE}")
