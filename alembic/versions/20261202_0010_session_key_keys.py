"""session-key keys: every key of a session's rows includes ``session_key`` (PostgreSQL)

A distributed PostgreSQL (Citus) spreads co-located tables over shards by one column and
requires every primary key and unique constraint to include it; PostgreSQL's own hash
partitioning has the same rule. Sessions are independent, so that column is
``session_key`` (docs/scaling.md#keys-and-statements). After this revision, on PostgreSQL:

* ``transcript_entries``, ``compacted_transcript_entries``, ``session_summaries``,
  ``session_context_states``, ``session_archives`` and ``canonical_archive_counts``: primary
  key ``(session_key, id)`` (the constraint keeps its name; ``id`` keeps its sequence and
  stays unique in practice, the sequence hands out each value once);
* ``uq_summaries_session_compaction_index``: ``(session_key, session_id, compaction_index)``;
* ``sessions`` keeps ``(session_key)`` and ``uq_sessions_session_id``; ``session_states`` and
  ``compaction_leases`` already have ``(session_key)``; ``scope_states`` is not a session's.

``canonical_archive_counts`` (revision 0007's derived counts) gets a ``session_key`` column
on both backends, filled by its triggers, so that its statements carry the key like every
other session-owned table's; its groups become ``(session_key, session_id, compaction_id)``.
The table is derived state: it is rebuilt whole (dropped, created with the new shape, its
triggers and function replaced, recomputed from the archive by one grouped ``INSERT ...
SELECT``), in the migration transaction, as 0007 did: the archive is locked against writers
(compactions, resets, forks, imports, deletions; appends are not held up) until the commit.

SQLite is otherwise unchanged: its ``INTEGER PRIMARY KEY AUTOINCREMENT`` row ids stay, and
one writer at a time makes the key rule moot. The metadata keeps SQLite's keys; what
PostgreSQL has beyond them is declared in ``db/schema_compare.py`` (``POSTGRES_KEYS``) and
checked there, so the drift check stays exact on both backends.

Built online on PostgreSQL (outside any transaction, the migration lock held): for each
table the new unique index is built ``CREATE UNIQUE INDEX CONCURRENTLY`` (an invalid
leftover of a failed build dropped first), then ``ALTER TABLE ... DROP CONSTRAINT <pk>, ADD
CONSTRAINT <pk> PRIMARY KEY USING INDEX ...`` swaps the key onto it: an ``ACCESS EXCLUSIVE``
lock for milliseconds (the columns are already NOT NULL: no scan, no rewrite). The summaries'
unique index is built the same way under a temporary name, then the old one dropped
(``CONCURRENTLY``) and the new one renamed: the new one enforces uniqueness throughout.

Idempotent: every change is skipped when the catalog shows it done (a replay, or a
partitioned database, created with these keys from the start). Downgrade restores the
previous keys and revision 0007's counts in the migration transaction (plain index builds:
writers wait; refused on a partitioned database, whose partitioning needs the new keys).
Offline (``--sql``, an empty database): plain statements.

The revision is expand-only: a release at 0009 never names the counts' columns (the
database's triggers write them) and its statements need no key they do not already satisfy.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-02
"""

# ruff: noqa: S608 (the names are this file's constants)

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from alembic import context, op
from opensquilla.session.db import layout
from opensquilla.session.errors import MigrationError

revision: str = "0010"
down_revision: str | Sequence[str] | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

expand_only = True

KEYED_TABLES = (
    "transcript_entries",
    "compacted_transcript_entries",
    "session_summaries",
    "session_context_states",
    "session_archives",
)
NEW_KEY = ("session_key", "id")
OLD_KEY = ("id",)
SUMMARY_INDEX = "uq_summaries_session_compaction_index"
SUMMARY_TABLE = "session_summaries"
# PostgreSQL indexes the ids by their md5 beside the key: at the longest key and ids the store
# allows (512 and 256 characters of up to 4 bytes) the key and the ids together would pass
# btree's 2,704-byte entry limit, and the write would fail. Two ids with one md5 would share a
# compaction index, or a row of counts; nothing else tells ids apart here.
SUMMARY_COLUMNS = ("session_key", "md5(session_id)", "compaction_index")
OLD_SUMMARY_COLUMNS = ("session_id", "compaction_index")

COUNTS = "canonical_archive_counts"
ARCHIVE = "compacted_transcript_entries"
GROUP_INDEX = "uq_canonical_archive_counts_group"
UNFILED_INDEX = "uq_canonical_archive_counts_unfiled"
FUNCTION = "opensquilla_canonical_archive_counts"
ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_GROUP = ("session_key", "session_id", "compaction_id")
_PG_GROUP = "session_key, md5(session_id), md5(compaction_id)"
_PG_UNFILED = "session_key, md5(session_id)"

# -- the counts, keyed: revision 0007's triggers with session_key in every group ------------


def _sqlite_group(row: str) -> str:
    return (
        f"session_key = {row}.session_key AND session_id = {row}.session_id "
        f"AND compaction_id IS {row}.compaction_id"
    )


def _sqlite_remove(row: str) -> str:
    return f"""UPDATE {COUNTS}
    SET archived = archived - 1, unlinked = unlinked - ({row}.original_entry_id IS NULL)
    WHERE {_sqlite_group(row)};
    DELETE FROM {COUNTS} WHERE {_sqlite_group(row)} AND archived = 0 AND unlinked = 0;"""


def _sqlite_add(row: str) -> str:
    unlinked = f"({row}.original_entry_id IS NULL)"
    return f"""UPDATE {COUNTS}
    SET archived = archived + 1, unlinked = unlinked + {unlinked}
    WHERE {_sqlite_group(row)};
    INSERT INTO {COUNTS} (session_key, session_id, compaction_id, archived, unlinked)
    SELECT {row}.session_key, {row}.session_id, {row}.compaction_id, 1, {unlinked}
    WHERE changes() = 0;"""


SQLITE_TRIGGERS = {
    f"{COUNTS}_ai": f"""CREATE TRIGGER {COUNTS}_ai AFTER INSERT ON {ARCHIVE} BEGIN
    {_sqlite_add("new")}
END""",
    f"{COUNTS}_ad": f"""CREATE TRIGGER {COUNTS}_ad AFTER DELETE ON {ARCHIVE} BEGIN
    {_sqlite_remove("old")}
END""",
    f"{COUNTS}_au": f"""CREATE TRIGGER {COUNTS}_au
AFTER UPDATE OF session_key, session_id, compaction_id, original_entry_id ON {ARCHIVE} BEGIN
    {_sqlite_remove("old")}
    {_sqlite_add("new")}
END""",
}

_COLS = ", ".join(_GROUP)


def _pg_delta(*sides: tuple[str, int]) -> str:
    """The grouped difference the rows of ``sides`` (transition table, +1 or -1) make; groups
    written in key order, so two statements never lock each other's rows in opposite orders."""
    rows = " UNION ALL ".join(
        f"SELECT {_COLS}, {sign} AS archived, "
        f"CASE WHEN original_entry_id IS NULL THEN {sign} ELSE 0 END AS unlinked FROM {name}"
        for name, sign in sides
    )
    return (
        "WITH delta AS MATERIALIZED ("
        f"SELECT {_COLS}, sum(archived) AS archived, "
        f"sum(unlinked) AS unlinked FROM ({rows}) AS changed "
        f"GROUP BY {_COLS} "
        "HAVING sum(archived) <> 0 OR sum(unlinked) <> 0), "
        f"filed AS (INSERT INTO {COUNTS} AS c ({_COLS}, archived, unlinked) "
        f"SELECT {_COLS}, archived, unlinked FROM delta "
        f"WHERE compaction_id IS NOT NULL ORDER BY {_COLS} "
        f"ON CONFLICT ({_PG_GROUP}) DO UPDATE "
        "SET archived = c.archived + excluded.archived, "
        "unlinked = c.unlinked + excluded.unlinked) "
        f"INSERT INTO {COUNTS} AS c ({_COLS}, archived, unlinked) "
        f"SELECT {_COLS}, archived, unlinked FROM delta "
        "WHERE compaction_id IS NULL ORDER BY session_key, session_id "
        f"ON CONFLICT ({_PG_UNFILED}) WHERE compaction_id IS NULL DO UPDATE "
        "SET archived = c.archived + excluded.archived, "
        "unlinked = c.unlinked + excluded.unlinked;"
    )


def _pg_emptied(old: str) -> str:
    return (
        f"DELETE FROM {COUNTS} WHERE archived = 0 AND unlinked = 0 "
        f"AND (session_key, session_id) IN (SELECT session_key, session_id FROM {old});"
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
        DELETE FROM {COUNTS};
    END IF;
    RETURN NULL;
END
$$"""

PG_TRIGGERS = {
    f"{COUNTS}_insert": "AFTER INSERT ON {archive} REFERENCING NEW TABLE AS added",
    f"{COUNTS}_delete": "AFTER DELETE ON {archive} REFERENCING OLD TABLE AS removed",
    f"{COUNTS}_update": (
        "AFTER UPDATE ON {archive} REFERENCING OLD TABLE AS removed NEW TABLE AS added"
    ),
    f"{COUNTS}_truncate": "AFTER TRUNCATE ON {archive}",
}

BACKFILL = (
    f"INSERT INTO {COUNTS} ({_COLS}, archived, unlinked) "
    f"SELECT {_COLS}, count(*), "
    "sum(CASE WHEN original_entry_id IS NULL THEN 1 ELSE 0 END) "
    f"FROM {ARCHIVE} GROUP BY {_COLS}"
)


def _counts_columns() -> list[sa.Column[Any]]:
    """The keyed counts table's columns after its ``id``."""
    return [
        sa.Column("session_key", sa.Text(), nullable=False),
        sa.Column("session_id", sa.Text(), nullable=False),
        sa.Column("compaction_id", sa.Text(), nullable=True),
        sa.Column("archived", sa.BigInteger(), nullable=False),
        sa.Column("unlinked", sa.BigInteger(), nullable=False),
    ]


def _create_counts_sqlite() -> None:
    """SQLite: the keyed counts table, its unique indexes and its triggers (no rows)."""
    op.create_table(
        COUNTS,
        sa.Column("id", ID, primary_key=True, autoincrement=True),
        *_counts_columns(),
    )
    _create_counts_indexes()


def _create_counts_indexes_postgres() -> None:
    op.execute(f"CREATE UNIQUE INDEX {GROUP_INDEX} ON {COUNTS} ({_PG_GROUP})")
    op.execute(
        f"CREATE UNIQUE INDEX {UNFILED_INDEX} ON {COUNTS} ({_PG_UNFILED}) "
        "WHERE compaction_id IS NULL"
    )


def _create_counts_indexes() -> None:
    """SQLite's unique indexes of the counts (PostgreSQL indexes the ids by md5)."""
    op.create_index(GROUP_INDEX, COUNTS, list(_GROUP), unique=True)
    unfiled = sa.text("compaction_id IS NULL")
    op.create_index(
        UNFILED_INDEX,
        COUNTS,
        ["session_key", "session_id"],
        unique=True,
        sqlite_where=unfiled,
        postgresql_where=unfiled,
    )


def _key_counts_postgres(bind: sa.engine.Connection | None) -> None:
    """The counts keyed in place, in the migration transaction: the column added (no
    rewrite), the function replaced, the rows recomputed, then the column made NOT NULL and
    the unique indexes and the key rebuilt on the small table. The counts table stays locked
    until the commit, so an archive write (its trigger writes the counts) waits for the
    recomputation; the archive itself is only read, and its triggers are left in place
    (they call the function by name), so no lock is taken on it beyond the read."""
    keyed = _counts_keyed(bind)
    if not keyed:
        op.execute(f"ALTER TABLE {COUNTS} ADD COLUMN session_key TEXT")
    op.execute(PG_FUNCTION)
    # A script's database has 0007's triggers; online, any missing one is made again.
    present = set(PG_TRIGGERS) if bind is None else _pg_triggers(bind)
    for name, event in PG_TRIGGERS.items():
        if name not in present:
            op.execute(
                f"CREATE TRIGGER {name} {event.format(archive=ARCHIVE)} "
                f"FOR EACH STATEMENT EXECUTE FUNCTION {FUNCTION}()"
            )
    op.execute(f"DELETE FROM {COUNTS}")
    op.execute(BACKFILL)
    if keyed:
        return
    op.execute(f"ALTER TABLE {COUNTS} ALTER COLUMN session_key SET NOT NULL")
    op.execute(f"DROP INDEX {GROUP_INDEX}")
    op.execute(f"DROP INDEX {UNFILED_INDEX}")
    _create_counts_indexes_postgres()
    name = op.f(f"pk_{COUNTS}") if bind is None else _primary_key(bind, COUNTS)[0]
    op.execute(
        f"ALTER TABLE {COUNTS} DROP CONSTRAINT {name}, "
        f"ADD CONSTRAINT {name} PRIMARY KEY ({', '.join(NEW_KEY)})"
    )


def _partition_counts(bind: sa.engine.Connection) -> None:
    """A new partitioned database (db/layout.py): 0007's counts table, empty as every table
    of it is, made again keyed and partitioned by session_key (0007's triggers stay: they
    call the function by name)."""
    op.execute(f"DROP TABLE {COUNTS}")
    layout.create_table(
        bind,
        COUNTS,
        sa.Column("id", ID, nullable=False, autoincrement=True),
        *_counts_columns(),
        sa.PrimaryKeyConstraint(*NEW_KEY, name=op.f(f"pk_{COUNTS}")),
    )
    _create_counts_indexes_postgres()


def _pg_triggers(bind: sa.engine.Connection) -> set[str]:
    rows = bind.execute(
        sa.text(
            "SELECT tgname FROM pg_trigger WHERE tgrelid = CAST(:table AS regclass) "
            "AND NOT tgisinternal"
        ),
        {"table": ARCHIVE},
    )
    return {str(name) for (name,) in rows}


def _drop_counts(postgres: bool) -> None:
    if postgres:
        for name in PG_TRIGGERS:
            op.execute(f"DROP TRIGGER IF EXISTS {name} ON {ARCHIVE}")
        op.execute(f"DROP FUNCTION IF EXISTS {FUNCTION}()")
    else:
        for name in SQLITE_TRIGGERS:
            op.execute(f"DROP TRIGGER IF EXISTS {name}")
    op.execute(f"DROP TABLE IF EXISTS {COUNTS}")


def _counts_keyed(bind: sa.engine.Connection | None) -> bool:
    if bind is None:
        return False
    return "session_key" in {c["name"] for c in sa.inspect(bind).get_columns(COUNTS)}


# -- PostgreSQL catalog ----------------------------------------------------------------------


def _primary_key(bind: sa.engine.Connection, table: str) -> tuple[str, tuple[str, ...]]:
    """The table's primary-key constraint: its name and its columns in key order."""
    row = bind.execute(
        sa.text(
            "SELECT c.conname, array_agg(a.attname::text ORDER BY k.n) "
            "FROM pg_constraint c "
            "CROSS JOIN LATERAL unnest(c.conkey) WITH ORDINALITY AS k(attnum, n) "
            "JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.attnum "
            "WHERE c.conrelid = CAST(:table AS regclass) AND c.contype = 'p' "
            "GROUP BY c.conname"
        ),
        {"table": table},
    ).one()
    return str(row[0]), tuple(row[1])


def _index_columns(bind: sa.engine.Connection, name: str) -> tuple[str, ...] | None:
    """A valid index's key elements in order (a column's name, or an expression as
    PostgreSQL prints it), ``None`` when there is no such valid index."""
    row = bind.execute(
        sa.text(
            "SELECT i.indisvalid, array(SELECT pg_get_indexdef(i.indexrelid, n, true) "
            "FROM generate_series(1, i.indnkeyatts) AS n ORDER BY n) "
            "FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
            "WHERE c.relname = :name AND pg_catalog.pg_table_is_visible(c.oid)"
        ),
        {"name": name},
    ).first()
    if row is None or not row[0]:
        return None
    return tuple(row[1])


def _present(bind: sa.engine.Connection, table: str) -> bool:
    return bind.scalar(sa.text("SELECT to_regclass(:table) IS NOT NULL"), {"table": table})


def _partitioned(bind: sa.engine.Connection) -> bool:
    kind = bind.scalar(
        sa.text("SELECT relkind::text FROM pg_class WHERE oid = to_regclass('sessions')")
    )
    return kind == "p"


def _drop_if_invalid(bind: sa.engine.Connection, name: str) -> None:
    """A ``CREATE INDEX CONCURRENTLY`` that failed leaves an invalid index behind, which
    ``IF NOT EXISTS`` would keep: drop it first (revisions 0003 and 0009 do the same)."""
    invalid = bind.scalar(
        sa.text(
            "SELECT NOT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
            "WHERE c.relname = :name AND pg_catalog.pg_table_is_visible(c.oid)"
        ),
        {"name": name},
    )
    if invalid:
        bind.execute(sa.text(f"DROP INDEX CONCURRENTLY IF EXISTS {name}"))


def _build_concurrently(bind: sa.engine.Connection, name: str, table: str, cols: str) -> None:
    _drop_if_invalid(bind, name)
    bind.execute(
        sa.text(f"CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS {name} ON {table} ({cols})")
    )


def _swap_primary_keys(bind: sa.engine.Connection) -> None:
    """Each keyed table's primary key onto :data:`NEW_KEY`: the unique index built concurrently,
    then the constraint swapped onto it (autocommit: each statement its own transaction)."""
    for table in KEYED_TABLES:
        if not _present(bind, table):
            continue  # the ordinary drift check names a missing table
        name, columns = _primary_key(bind, table)
        staged = f"{table}_pkey_next"
        if columns == NEW_KEY:
            _drop_if_invalid(bind, staged)
            bind.execute(sa.text(f"DROP INDEX CONCURRENTLY IF EXISTS {staged}"))
            continue
        _build_concurrently(bind, staged, table, ", ".join(NEW_KEY))
        bind.execute(
            sa.text(
                f"ALTER TABLE {table} DROP CONSTRAINT {name}, "
                f"ADD CONSTRAINT {name} PRIMARY KEY USING INDEX {staged}"
            )
        )


def _swap_summary_index(bind: sa.engine.Connection) -> None:
    staged = f"{SUMMARY_INDEX}_next"
    columns = SUMMARY_COLUMNS
    if _index_columns(bind, SUMMARY_INDEX) == columns:
        _drop_if_invalid(bind, staged)
        bind.execute(sa.text(f"DROP INDEX CONCURRENTLY IF EXISTS {staged}"))
        return
    if not layout.concurrent_indexes(bind):
        # A new partitioned database (empty; no CONCURRENTLY on a partitioned parent).
        bind.execute(sa.text(f"DROP INDEX IF EXISTS {SUMMARY_INDEX}"))
        bind.execute(
            sa.text(
                f"CREATE UNIQUE INDEX {SUMMARY_INDEX} ON {SUMMARY_TABLE} ({', '.join(columns)})"
            )
        )
        return
    _build_concurrently(bind, staged, SUMMARY_TABLE, ", ".join(columns))
    # The staged index enforces its uniqueness from here on, so the old one can go without
    # a lock writers wait on, and the rename (SHARE UPDATE EXCLUSIVE) blocks none of them.
    bind.execute(sa.text(f"DROP INDEX CONCURRENTLY IF EXISTS {SUMMARY_INDEX}"))
    bind.execute(sa.text(f"ALTER INDEX {staged} RENAME TO {SUMMARY_INDEX}"))


# -- upgrade / downgrade ---------------------------------------------------------------------


def upgrade() -> None:
    postgres = op.get_context().dialect.name == "postgresql"
    offline = context.is_offline_mode()
    bind = None if offline else op.get_bind()
    if not postgres:
        # One transaction (BEGIN IMMEDIATE): the derived table rebuilt keyed, its triggers
        # made again whoever created it (0007 leaves a keyed one alone: a replay), and the
        # counts recomputed, as 0007 does.
        if not _counts_keyed(bind):
            _drop_counts(postgres)
            _create_counts_sqlite()
        for name, ddl in SQLITE_TRIGGERS.items():
            op.execute(f"DROP TRIGGER IF EXISTS {name}")
            op.execute(ddl)
        op.execute(f"DELETE FROM {COUNTS}")
        op.execute(BACKFILL)
        return
    if (
        bind is not None
        and layout.active(bind).partitioned
        and not layout.is_partitioned(bind, COUNTS)
    ):
        _partition_counts(bind)
    _key_counts_postgres(bind)
    if offline:
        # A script is for an empty database: plain statements, one transaction.
        for table in KEYED_TABLES:
            pk = op.f(f"pk_{table}")
            op.execute(
                f"ALTER TABLE {table} DROP CONSTRAINT {pk}, "
                f"ADD CONSTRAINT {pk} PRIMARY KEY ({', '.join(NEW_KEY)})"
            )
        op.execute(f"DROP INDEX {SUMMARY_INDEX}")
        op.execute(
            f"CREATE UNIQUE INDEX {SUMMARY_INDEX} ON {SUMMARY_TABLE} ({', '.join(SUMMARY_COLUMNS)})"
        )
        return
    with op.get_context().autocommit_block():
        _swap_summary_index(op.get_bind())
        _swap_primary_keys(op.get_bind())


def downgrade() -> None:
    """One transaction, as the revisions below: a refusal further down (0002's) leaves this
    one undone too. So the old keys are built in place (``ADD PRIMARY KEY``, a plain index
    build under the table's lock: writers wait for it); a downgrade is an operator's rare
    step, not a rolling one."""
    postgres = op.get_context().dialect.name == "postgresql"
    offline = context.is_offline_mode()
    bind = None if offline else op.get_bind()
    if postgres and bind is not None and _partitioned(bind):
        raise MigrationError(
            "this database is partitioned by session_key, which needs the keys of revision "
            "0010: it cannot go below 0010 (export its sessions and import them into a plain "
            "database instead)"
        )
    # The counts back to revision 0007's shape, recomputed from the archive.
    previous = context.script.get_revision("0007").module
    _drop_counts(postgres)
    previous.upgrade()
    if not postgres:
        return
    for table in KEYED_TABLES:
        if bind is None:
            name, columns = op.f(f"pk_{table}"), NEW_KEY
        elif _present(bind, table):
            name, columns = _primary_key(bind, table)
        else:
            continue
        if columns != OLD_KEY:
            op.execute(
                f"ALTER TABLE {table} DROP CONSTRAINT {name}, "
                f"ADD CONSTRAINT {name} PRIMARY KEY ({', '.join(OLD_KEY)})"
            )
    if bind is None or _index_columns(bind, SUMMARY_INDEX) != OLD_SUMMARY_COLUMNS:
        op.execute(f"DROP INDEX IF EXISTS {SUMMARY_INDEX}")
        op.create_index(SUMMARY_INDEX, SUMMARY_TABLE, list(OLD_SUMMARY_COLUMNS), unique=True)
