"""transcript search: FTS5 on SQLite, tsvector and pg_trgm on PostgreSQL

SQLite (docs/search.md#schema):

* the older store's objects, exactly: ``transcript_fts`` (FTS5, one column ``content``,
  external content ``transcript_entries``, ``content_rowid=id``, tokenizer ``unicode61``)
  and the triggers ``transcript_fts_ai`` / ``_ad`` / ``_au`` that keep it in sync. An
  adopted legacy file already has them and keeps them as they are; where any was missing,
  the index is rebuilt over the existing rows (the FTS5 ``'rebuild'`` command), so nothing
  written before the upgrade is unsearchable;
* the same over the compacted archive (``compacted_transcript_fts`` and its three
  triggers), for searches that include archived rows.

The whole upgrade is one transaction (``BEGIN IMMEDIATE``): SQLite has one writer, so
writers wait for the rebuild (about 6 s per million rows on this machine kind).

PostgreSQL, built to run while the gateway writes:

* ``pg_trgm`` (created if absent; a server that refuses it stops the upgrade with a message
  saying what to ask the administrator for);
* ``transcript_entries.search_vector`` (``tsvector``, the ``simple`` configuration: words
  lowercased, no stemming, like FTS5's ``unicode61``), kept by a ``BEFORE INSERT OR UPDATE
  OF content`` trigger, so releases that do not know the column still fill it;
* then, outside any transaction (Alembic's autocommit block, the migration lock still
  held): the existing rows' vectors back-filled in batches of :data:`BATCH` rows, each its
  own short transaction, and the GIN indexes built ``CONCURRENTLY``: words
  (``search_vector``) and trigrams (``content gin_trgm_ops``) on the live table, the same
  two as expression indexes on the archive. Writers are never blocked for longer than one
  batch. An index left invalid by an interrupted build is dropped and built again.

The revision is expand-only (``expand_only``): it adds objects that older releases ignore
and that the database keeps current on its own, so a release at 0002 runs against a
database at 0003 (docs/migrations.md#rolling-deploys).

Downgrade removes what the upgrade added: the FTS tables and triggers (on a legacy file too:
the older store recreates them empty, see docs/search.md#downgrade), the column, trigger,
function and indexes. The ``pg_trgm`` extension stays: other schemas may use it.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

# ruff: noqa: E501, S608 (the older store's DDL verbatim; names are this file's constants)

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import context, op
from opensquilla.session.db import layout
from opensquilla.session.errors import MigrationError

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

expand_only = True

# Rows per back-fill transaction on PostgreSQL.
BATCH = 5000

# -- SQLite: the older store's DDL, character for character ---------------------------------

_LIVE_FTS = {
    "transcript_fts": """CREATE VIRTUAL TABLE transcript_fts
USING fts5(content, content=transcript_entries, content_rowid=id)""",
    "transcript_fts_ai": """CREATE TRIGGER transcript_fts_ai AFTER INSERT ON transcript_entries BEGIN
    INSERT INTO transcript_fts(rowid, content) VALUES (new.id, new.content);
END""",
    "transcript_fts_ad": """CREATE TRIGGER transcript_fts_ad AFTER DELETE ON transcript_entries BEGIN
    INSERT INTO transcript_fts(transcript_fts, rowid, content)
    VALUES ('delete', old.id, old.content);
END""",
    "transcript_fts_au": """CREATE TRIGGER transcript_fts_au AFTER UPDATE ON transcript_entries BEGIN
    INSERT INTO transcript_fts(transcript_fts, rowid, content)
    VALUES ('delete', old.id, old.content);
    INSERT INTO transcript_fts(rowid, content) VALUES (new.id, new.content);
END""",
}


def _archive_fts() -> dict[str, str]:
    """The same objects over the compacted archive (ours; the older store has none)."""
    renamed = {}
    for name, ddl in _LIVE_FTS.items():
        new_name = "compacted_" + name
        renamed[new_name] = (
            ddl.replace("transcript_fts", "compacted_transcript_fts")
            .replace("content=transcript_entries", "content=compacted_transcript_entries")
            .replace("ON transcript_entries", "ON compacted_transcript_entries")
        )
    return renamed


_ARCHIVE_FTS = _archive_fts()

# -- PostgreSQL -------------------------------------------------------------------------------

LIVE = "transcript_entries"
ARCHIVE = "compacted_transcript_entries"
COLUMN = "search_vector"
# The words of a stored text. A text the store escaped (it held NUL: U+FDD0, then the text
# with NUL written as \0) has its NULs read as spaces, so no word is glued to a neighbour.
WORDS_FUNCTION = "transcript_search_vector"
WORDS = f"{WORDS_FUNCTION}(content)"
FUNCTION = "transcript_entries_search_vector"
TRIGGER = "transcript_entries_search_vector"
# name -> (table, USING gin (...))
PG_INDEXES = {
    "ix_transcript_entries_search_vector": (LIVE, COLUMN),
    "ix_transcript_entries_content_trgm": (LIVE, "content {trgm}"),
    "ix_compacted_transcript_entries_search_vector": (ARCHIVE, f"({WORDS})"),
    "ix_compacted_transcript_entries_content_trgm": (ARCHIVE, "content {trgm}"),
}
_TRGM_ADVICE = (
    "transcript search on PostgreSQL needs the pg_trgm extension, and this role may not "
    "create it ({error}). Ask the server's administrator to run CREATE EXTENSION pg_trgm in "
    "this database (managed services list it among their supported extensions), then "
    "upgrade again. Nothing was changed by this revision"
)


def upgrade() -> None:
    if op.get_context().dialect.name == "postgresql":
        _upgrade_postgres()
    else:
        _upgrade_sqlite()


def downgrade() -> None:
    if op.get_context().dialect.name == "postgresql":
        for name in PG_INDEXES:
            op.execute(f"DROP INDEX IF EXISTS {name}")
        op.execute(f"DROP TRIGGER IF EXISTS {TRIGGER} ON {LIVE}")
        op.execute(f"DROP FUNCTION IF EXISTS {FUNCTION}()")
        op.execute(f"DROP FUNCTION IF EXISTS {WORDS_FUNCTION}(text)")
        op.execute(f"ALTER TABLE {LIVE} DROP COLUMN IF EXISTS {COLUMN}")
        return
    for objects in (_ARCHIVE_FTS, _LIVE_FTS):
        for name in reversed(list(objects)):
            kind = "TABLE" if name.endswith("_fts") else "TRIGGER"
            op.execute(f"DROP {kind} IF EXISTS {name}")


# -- SQLite -----------------------------------------------------------------------------------


def _upgrade_sqlite() -> None:
    if context.is_offline_mode():
        for objects in (_LIVE_FTS, _ARCHIVE_FTS):
            for ddl in objects.values():
                op.execute(ddl)
        return
    bind = op.get_bind()
    present = {name for (name,) in bind.execute(sa.text("SELECT name FROM sqlite_master"))}
    for objects in (_LIVE_FTS, _ARCHIVE_FTS):
        missing = [name for name in objects if name not in present]
        for name in missing:
            op.execute(objects[name])
        if missing:
            # Some rows were written without the index keeping up (or before it existed).
            fts = next(iter(objects))
            op.execute(f"INSERT INTO {fts}({fts}) VALUES ('rebuild')")


# -- PostgreSQL -------------------------------------------------------------------------------


def _upgrade_postgres() -> None:
    offline = context.is_offline_mode()
    if offline:
        op.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
        trgm = "gin_trgm_ops"  # a script's search path holds the extension's schema
    else:
        trgm = _trigram_opclass(op.get_bind())
    op.execute(f"ALTER TABLE {LIVE} ADD COLUMN IF NOT EXISTS {COLUMN} tsvector")
    op.execute(
        f"CREATE OR REPLACE FUNCTION {WORDS_FUNCTION}(text) RETURNS tsvector "
        "LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT to_tsvector('simple', "
        "CASE WHEN left($1, 1) = U&'\\FDD0' THEN replace($1, '\\0', ' ') "
        "ELSE coalesce($1, '') END) $$"
    )
    op.execute(
        f"CREATE OR REPLACE FUNCTION {FUNCTION}() RETURNS trigger LANGUAGE plpgsql AS $$ "
        f"BEGIN NEW.{COLUMN} := {WORDS_FUNCTION}(NEW.content); RETURN NEW; END $$"
    )
    op.execute(f"DROP TRIGGER IF EXISTS {TRIGGER} ON {LIVE}")
    op.execute(
        f"CREATE TRIGGER {TRIGGER} BEFORE INSERT OR UPDATE OF content ON {LIVE} "
        f"FOR EACH ROW EXECUTE FUNCTION {FUNCTION}()"
    )
    if offline or not layout.concurrent_indexes(op.get_bind()):
        # A script is for an empty database (env.py): no rows to fill, plain indexes, and
        # the script stays one transaction. A partitioned database (db/layout.py) is
        # created empty too, and its parents cannot build an index CONCURRENTLY.
        for name, (table, expression) in PG_INDEXES.items():
            using = expression.format(trgm=trgm)
            op.execute(f"CREATE INDEX IF NOT EXISTS {name} ON {table} USING gin ({using})")
        return
    # From here every new or edited row carries its vector; commit that, then fill the
    # older rows and build the indexes without holding a lock writers would wait on.
    with op.get_context().autocommit_block():
        _backfill(op.get_bind())
        for name, (table, expression) in PG_INDEXES.items():
            _drop_if_invalid(op.get_bind(), name)
            op.execute(
                f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {name} ON {table} "
                f"USING gin ({expression.format(trgm=trgm)})"
            )


def _trigram_opclass(bind: sa.engine.Connection) -> str:
    """``pg_trgm`` installed (created if absent), and its operator class named by the schema
    the extension lives in: a store in a schema of its own has only that schema on its
    search path, while the extension is usually in ``public``."""
    where = sa.text(
        "SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace "
        "WHERE e.extname = 'pg_trgm'"
    )
    schema = bind.scalar(where)
    if schema is None:
        try:
            with bind.begin_nested():
                bind.execute(sa.text("CREATE EXTENSION IF NOT EXISTS pg_trgm"))
        except sa.exc.DBAPIError as exc:
            error = " ".join(str(exc.orig).split()) if exc.orig is not None else type(exc).__name__
            raise MigrationError(_TRGM_ADVICE.format(error=error)) from exc
        schema = bind.scalar(where)
    return f'"{schema}".gin_trgm_ops'


def _backfill(bind: sa.engine.Connection) -> None:
    """Fill ``search_vector`` of the rows written before the trigger, :data:`BATCH` ids per
    statement (each its own transaction: the block is in autocommit)."""
    low, high = bind.execute(sa.text(f"SELECT min(id), max(id) FROM {LIVE}")).one()
    if low is None:
        return
    fill = sa.text(
        f"UPDATE {LIVE} SET {COLUMN} = {WORDS} WHERE id >= :low AND id < :high AND {COLUMN} IS NULL"
    )
    for start in range(int(low), int(high) + 1, BATCH):
        bind.execute(fill, {"low": start, "high": start + BATCH})


def _drop_if_invalid(bind: sa.engine.Connection, name: str) -> None:
    invalid = bind.scalar(
        sa.text(
            "SELECT NOT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
            "WHERE c.relname = :name AND pg_catalog.pg_table_is_visible(c.oid)"
        ),
        {"name": name},
    )
    if invalid:
        bind.execute(sa.text(f"DROP INDEX CONCURRENTLY IF EXISTS {name}"))
