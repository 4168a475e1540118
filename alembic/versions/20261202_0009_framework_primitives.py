"""framework primitives: per-entry metadata, session and scoped state, the prefix index

What agent frameworks need from the store (docs/semantics.md#framework-primitives):

* ``metadata``, a nullable ``TEXT`` column on ``transcript_entries`` and on
  ``compacted_transcript_entries``: the caller's own JSON object per entry, stored as JSON
  *text* (not ``jsonb``), so it reads back exactly as written, key order included. The
  store never reads it (compaction, search and the context view ignore it); it travels with
  its entry into the archive, a fork, a copy, an export and a reset archive.
* ``session_states``: one row per session key, the session's state (a JSON object as text)
  and its ``revision`` (the compare-and-set counter), with the ``session_id`` of the
  generation it belongs to. Not one of the five tables: a session's row upsert never touches
  it, so a whole-row write can never put back a stale state.
* ``scope_states``: state wider than one session, one row per ``(scope, scope_id)``
  (``scope`` is ``app`` or ``user``), same revision rule. Listings, stats and retention never
  see it: it holds no sessions.
* SQLite: the ``transcript_appends`` view and its trigger (revision 0008) recreated with the
  new column, plus ``order_floor``: when it is 1 the trigger raises ``created_at`` to the
  newest ``created_at`` among the generation's live entries, so a defaulted timestamp never
  sorts before an entry already written, whatever the writer's clock (the floor is taken
  inside the statement, under the write lock).
* PostgreSQL: ``idx_sessions_key_prefix`` on ``session_key COLLATE "C"``, built
  ``CONCURRENTLY``: the prefix listing's range (``>= prefix`` and ``<`` the next prefix)
  is byte order whatever the database's collation, and this index serves it. SQLite's
  primary-key index already compares bytes.

PostgreSQL: the column additions are metadata-only (a nullable column with no default
rewrites nothing; the ``ACCESS EXCLUSIVE`` lock is held for milliseconds), the new tables
are new, and the index is built without blocking writers.

The revision is expand-only: a release without it never reads the new column or tables, and
its appends through the view leave the new view columns NULL (no metadata, no floor).

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02
"""

# ruff: noqa: S608 (the names are this file's constants)

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import context, op
from opensquilla.session.db import layout

revision: str = "0009"
down_revision: str | Sequence[str] | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

expand_only = True

METADATA_COLUMN = "metadata"
ENTRY_TABLES = ("transcript_entries", "compacted_transcript_entries")
SESSION_STATES = "session_states"
SCOPE_STATES = "scope_states"
PREFIX_INDEX = "idx_sessions_key_prefix"

VIEW = "transcript_appends"
TRIGGER = "transcript_appends_insert"
# transcript_entries' columns without id, in table order (revision 0008's, then metadata).
ENTRY_COLUMNS = (
    "session_id",
    "session_key",
    "message_id",
    "role",
    "content",
    "tool_calls",
    "tool_call_id",
    "reasoning_content",
    "turn_usage",
    "turn_context",
    "created_at",
    "token_count",
    "provenance_kind",
    "provenance_origin_session_id",
    "provenance_source_session_key",
    "provenance_source_channel",
    "provenance_source_tool",
    "schema_version",
    "metadata",
)
FENCE_COLUMNS = ("fence_epoch", "touched_at", "token_delta", "tokens_ceiling", "order_floor")

_COLUMNS = ", ".join(ENTRY_COLUMNS)
_FENCE = ", ".join(f"CAST(NULL AS INTEGER) AS {name}" for name in FENCE_COLUMNS)
CREATE_VIEW = f"""CREATE VIEW IF NOT EXISTS {VIEW} AS
SELECT {_COLUMNS}, {_FENCE}
FROM transcript_entries WHERE 0"""

_DELTA = "ifnull(NEW.token_delta, 0)"
_FENCED = (
    "session_key = NEW.session_key AND epoch = NEW.fence_epoch AND session_id = NEW.session_id"
)
# The floor: the newest live created_at of the generation (the cursor index answers it).
_CREATED_AT = (
    "CASE WHEN ifnull(NEW.order_floor, 0) = 0 THEN NEW.created_at ELSE max(NEW.created_at, "
    "ifnull((SELECT max(created_at) FROM transcript_entries "
    "WHERE session_id = NEW.session_id), NEW.created_at)) END"
)
_VALUES = ", ".join(
    _CREATED_AT if name == "created_at" else "NEW." + name for name in ENTRY_COLUMNS
)
CREATE_TRIGGER = f"""CREATE TRIGGER IF NOT EXISTS {TRIGGER} INSTEAD OF INSERT ON {VIEW}
BEGIN
    UPDATE sessions SET updated_at = NEW.touched_at
    WHERE {_DELTA} = 0 AND {_FENCED};
    SELECT RAISE(IGNORE) WHERE {_DELTA} = 0 AND changes() = 0;
    UPDATE sessions SET updated_at = NEW.touched_at,
        total_tokens = total_tokens + NEW.token_delta, total_tokens_fresh = 0
    WHERE {_DELTA} <> 0 AND {_FENCED} AND total_tokens <= NEW.tokens_ceiling;
    SELECT RAISE(IGNORE) WHERE {_DELTA} <> 0 AND changes() = 0;
    INSERT INTO transcript_entries ({_COLUMNS})
    VALUES ({_VALUES});
END"""


def _state_tables() -> None:
    layout.create_table(
        None if context.is_offline_mode() else op.get_bind(),
        SESSION_STATES,
        sa.Column("session_key", sa.Text(), primary_key=True),
        sa.Column("session_id", sa.Text(), nullable=False),
        sa.Column("state", sa.Text(), nullable=False, server_default=sa.text("'{}'")),
        sa.Column("revision", sa.BigInteger(), nullable=False, server_default=sa.text("0")),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
    )
    op.create_table(
        SCOPE_STATES,
        sa.Column("scope", sa.Text(), primary_key=True),
        sa.Column("scope_id", sa.Text(), primary_key=True),
        sa.Column("state", sa.Text(), nullable=False, server_default=sa.text("'{}'")),
        sa.Column("revision", sa.BigInteger(), nullable=False, server_default=sa.text("0")),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
    )


def upgrade() -> None:
    # Idempotent, as every revision: a database whose version row was lost replays it.
    offline = context.is_offline_mode()
    inspector = None if offline else sa.inspect(op.get_bind())
    for table in ENTRY_TABLES:
        names = () if inspector is None else [c["name"] for c in inspector.get_columns(table)]
        if METADATA_COLUMN not in names:
            op.add_column(table, sa.Column(METADATA_COLUMN, sa.Text(), nullable=True))
    if inspector is None or not inspector.has_table(SESSION_STATES):
        _state_tables()
    dialect = op.get_context().dialect.name
    if dialect == "sqlite":
        op.execute(f"DROP TRIGGER IF EXISTS {TRIGGER}")
        op.execute(f"DROP VIEW IF EXISTS {VIEW}")
        op.execute(CREATE_VIEW)
        op.execute(CREATE_TRIGGER)
        return
    if dialect != "postgresql":
        return
    create = (
        f'CREATE INDEX {{how}}IF NOT EXISTS {PREFIX_INDEX} ON sessions (session_key COLLATE "C")'
    )
    if offline or not layout.concurrent_indexes(op.get_bind()):
        # A script is for an empty database: a plain index, and one transaction; a
        # partitioned parent cannot build one CONCURRENTLY (it is empty too).
        op.execute(create.format(how=""))
        return
    with op.get_context().autocommit_block():
        _drop_if_invalid(op.get_bind(), PREFIX_INDEX)
        op.execute(create.format(how="CONCURRENTLY "))


def _drop_if_invalid(bind: sa.engine.Connection, name: str) -> None:
    """A ``CREATE INDEX CONCURRENTLY`` that failed leaves an invalid index behind, which
    ``IF NOT EXISTS`` would keep: drop it first."""
    invalid = bind.scalar(
        sa.text(
            "SELECT NOT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
            "WHERE c.relname = :name AND pg_catalog.pg_table_is_visible(c.oid)"
        ),
        {"name": name},
    )
    if invalid:
        bind.execute(sa.text(f"DROP INDEX CONCURRENTLY IF EXISTS {name}"))


def downgrade() -> None:
    offline = context.is_offline_mode()
    dialect = op.get_context().dialect.name
    if dialect == "postgresql":
        op.execute(f"DROP INDEX IF EXISTS {PREFIX_INDEX}")
    if dialect == "sqlite":
        # Back to revision 0008's view and trigger, without the new columns.
        previous = context.script.get_revision("0008").module
        op.execute(f"DROP TRIGGER IF EXISTS {TRIGGER}")
        op.execute(f"DROP VIEW IF EXISTS {VIEW}")
        op.execute(previous.CREATE_VIEW)
        op.execute(previous.CREATE_TRIGGER)
    inspector = None if offline else sa.inspect(op.get_bind())
    for table in (SCOPE_STATES, SESSION_STATES):
        if inspector is None or inspector.has_table(table):
            op.drop_table(table)
    for table in ENTRY_TABLES:
        names = (
            (METADATA_COLUMN,)
            if inspector is None
            else [c["name"] for c in inspector.get_columns(table)]
        )
        if METADATA_COLUMN in names:
            # ALTER TABLE ... DROP COLUMN on both (SQLite 3.35+): a batch rebuild of the
            # table would drop the search triggers with it.
            op.execute(f"ALTER TABLE {table} DROP COLUMN {METADATA_COLUMN}")
