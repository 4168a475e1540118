"""baseline: the five session tables, adopting a legacy database in place

Written by hand to create exactly what the metadata declares (``alembic check``, run by
the tests on both backends, verifies that they agree), and so that it also adopts
databases written by the older raw-SQL store, which have some or all of these tables, no
``alembic_version``, and fewer columns:

* a missing table is created whole;
* a present table is widened in place with plain ``ALTER TABLE ... ADD COLUMN``, never
  rebuilt (a move-and-copy would drop the legacy FTS and epoch triggers and reset
  ``sqlite_sequence``). NOT NULL columns carry server defaults, so existing rows read back
  with them;
* missing indexes are created; tables that are not ours are never touched;
* the epoch guard (a trigger refusing a lower ``sessions.epoch``) exists on both backends;
* a table that merely shares one of the five names (its key columns are not ours) is
  refused with a ``MigrationError`` before anything is written: adopting it would graft
  our columns and triggers onto someone else's table, and a later ``downgrade base`` would
  drop it with its rows;
* rows older than the cost-source columns are back-filled as the older store's own
  migration (yoyo ``V007__session_cost_source_rollup``) did.

The live schema is inspected here, so the revision is idempotent and safe on a
half-adopted file. An offline run (``alembic upgrade head --sql``) cannot inspect anything:
it writes the script for an empty database, and says that adopting an existing one needs
an online upgrade.

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from alembic import context, op
from opensquilla.session.db import layout
from opensquilla.session.errors import MigrationError

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

log = logging.getLogger("alembic.runtime.migration")

JSON = sa.JSON(none_as_null=True).with_variant(
    postgresql.JSONB(none_as_null=True, astext_type=sa.Text()), "postgresql"
)
ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def _int(name: str, default: int | None = None, *, big: bool = True) -> sa.Column[Any]:
    kind: Any = sa.BigInteger() if big else sa.Integer()
    if default is None:
        return sa.Column(name, kind, nullable=True)
    return sa.Column(name, kind, server_default=sa.text(str(default)), nullable=False)


def _text(name: str, default: str | None = None, *, nullable: bool = True) -> sa.Column[Any]:
    if default is not None:
        return sa.Column(name, sa.Text(), server_default=sa.text(f"'{default}'"), nullable=False)
    return sa.Column(name, sa.Text(), nullable=nullable)


def _bool(name: str, default: bool) -> sa.Column[Any]:
    return sa.Column(
        name, sa.Boolean(), server_default=sa.true() if default else sa.false(), nullable=False
    )


def _real(name: str) -> sa.Column[Any]:
    return sa.Column(name, sa.Float(), server_default=sa.text("0.0"), nullable=False)


def _json(name: str) -> sa.Column[Any]:
    return sa.Column(name, JSON, nullable=True)


def _required_ms(name: str) -> sa.Column[Any]:
    return sa.Column(name, sa.BigInteger(), nullable=False)


def _id() -> sa.Column[Any]:
    return sa.Column("id", ID, autoincrement=True, nullable=False)


def _sessions() -> list[Any]:
    return [
        sa.Column("session_key", sa.Text(), nullable=False),
        _text("session_id", nullable=False),
        _required_ms("created_at"),
        _required_ms("updated_at"),
        _int("started_at"),
        _int("ended_at"),
        _int("runtime_ms"),
        _text("last_channel"),
        _text("last_to"),
        _text("last_account_id"),
        _text("last_thread_id"),
        _json("delivery_context"),
        _text("model"),
        _text("model_provider"),
        _text("provider_override"),
        _text("model_override"),
        _text("auth_profile_override"),
        _text("auth_profile_override_source"),
        _int("context_tokens"),
        _text("model_routing_mode"),
        _int("model_routing_revision", 0, big=False),
        _int("input_tokens", 0),
        _int("output_tokens", 0),
        _int("total_tokens", 0),
        _bool("total_tokens_fresh", False),
        _real("estimated_cost_usd"),
        _real("total_cost_usd"),
        _real("billed_cost_usd"),
        _real("estimated_cost_component_usd"),
        _text("cost_source", "none"),
        _int("missing_cost_entries", 0),
        _int("cache_read", 0),
        _int("cache_write", 0),
        _int("compaction_count", 0, big=False),
        _text("session_file"),
        _text("spawned_by"),
        _text("parent_session_key"),
        _bool("forked_from_parent", False),
        _int("spawn_depth", 0, big=False),
        _text("status", "running"),
        _text("chat_type", "unknown"),
        _text("thinking_level"),
        _bool("fast_mode", False),
        _text("verbose_level"),
        _text("reasoning_level"),
        _text("send_policy", "allow"),
        _text("queue_mode", "steer"),
        _text("collaboration_mode", "default"),
        _int("collaboration_revision", 0, big=False),
        _text("active_plan_revision_id"),
        _text("label"),
        _text("display_name"),
        _text("derived_title"),
        _text("channel"),
        _text("group_id"),
        _text("subject"),
        _json("origin"),
        _text("workspace_id"),
        _text("agent_id", "main"),
        _int("schema_version", 1, big=False),
        _int("epoch", 0),
        sa.PrimaryKeyConstraint("session_key", name=op.f("pk_sessions")),
    ]


def _message_columns() -> list[Any]:
    """The message payload shared by the live transcript and the compacted archive."""
    return [
        _text("message_id", nullable=False),
        _text("role", nullable=False),
        _text("content"),
        _json("tool_calls"),
        _text("tool_call_id"),
        _text("reasoning_content"),
        _json("turn_usage"),
        _json("turn_context"),
        _required_ms("created_at"),
        _int("token_count"),
        _text("provenance_kind"),
        _text("provenance_origin_session_id"),
        _text("provenance_source_session_key"),
        _text("provenance_source_channel"),
        _text("provenance_source_tool"),
    ]


def _transcript_entries() -> list[Any]:
    return [
        _id(),
        _text("session_id", nullable=False),
        _text("session_key", nullable=False),
        *_message_columns(),
        _int("schema_version", 1, big=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_transcript_entries")),
    ]


def _compacted_transcript_entries() -> list[Any]:
    return [
        _id(),
        _text("session_id", nullable=False),
        _text("session_key", nullable=False),
        _text("compaction_id"),
        _int("compaction_index", big=False),
        _int("original_entry_id"),
        *_message_columns(),
        _required_ms("archived_at"),
        _int("schema_version", 1, big=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_compacted_transcript_entries")),
    ]


def _session_summaries() -> list[Any]:
    return [
        _id(),
        _text("session_id", nullable=False),
        _text("session_key", nullable=False),
        _int("compaction_index", 0, big=False),
        _text("compaction_id"),
        _text("trigger_reason"),
        _text("summary_text", nullable=False),
        _json("summary_payload"),
        _text("summary_format", "text"),
        _text("summary_source", "unknown"),
        _text("coverage_status", "unknown"),
        _json("missing_obligations"),
        _json("critical_carry_forward"),
        _int("tokens_before"),
        _int("tokens_after"),
        _int("removed_count", 0, big=False),
        _int("kept_count", 0, big=False),
        _int("chunk_count", 0, big=False),
        _text("flush_receipt_status", "unknown"),
        _int("covered_through_id", 0),
        _required_ms("created_at"),
        _int("schema_version", 1, big=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_session_summaries")),
    ]


def _session_context_states() -> list[Any]:
    return [
        _id(),
        _text("session_id", nullable=False),
        _text("session_key", nullable=False),
        _text("provider", "portable"),
        _text("model"),
        _text("state_kind", nullable=False),
        sa.Column("payload", JSON, server_default=sa.text("'{}'"), nullable=False),
        _int("covered_through_id", 0),
        _required_ms("created_at"),
        _int("expires_at"),
        _bool("portable", False),
        _bool("cacheable", False),
        _bool("valid", True),
        _text("invalid_reason"),
        _int("schema_version", 1, big=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_session_context_states")),
    ]


# table -> (columns, {index name: (columns, unique)}, create_table keyword arguments)
IndexSpec = dict[str, tuple[list[str], bool]]
TABLES: dict[str, tuple[Callable[[], list[Any]], IndexSpec, dict[str, Any]]] = {
    "sessions": (
        _sessions,
        {
            "idx_sessions_updated_at": (["updated_at"], False),
            "idx_sessions_workspace_id": (["workspace_id"], False),
        },
        {},
    ),
    "transcript_entries": (
        _transcript_entries,
        {
            "idx_transcript_session_id": (["session_id"], False),
            "idx_transcript_session_key": (["session_key"], False),
            "idx_transcript_session_cursor": (["session_id", "created_at", "id"], False),
        },
        {"sqlite_autoincrement": True},
    ),
    "compacted_transcript_entries": (
        _compacted_transcript_entries,
        {
            "idx_compacted_transcript_session_id": (["session_id"], False),
            "idx_compacted_transcript_session_key": (["session_key"], False),
            "idx_compacted_transcript_session_cursor": (
                ["session_id", "created_at", "original_entry_id", "id"],
                False,
            ),
            "idx_compacted_transcript_session_compaction": (
                ["session_id", "compaction_id"],
                False,
            ),
        },
        {"sqlite_autoincrement": True},
    ),
    "session_summaries": (
        _session_summaries,
        {
            "idx_summaries_session_id": (["session_id"], False),
            "uq_summaries_session_compaction_index": (["session_id", "compaction_index"], True),
        },
        {"sqlite_autoincrement": True},
    ),
    "session_context_states": (
        _session_context_states,
        {
            "idx_context_states_session_id": (["session_id"], False),
            "idx_context_states_key_valid": (
                ["session_key", "valid", "state_kind", "provider"],
                False,
            ),
        },
        {"sqlite_autoincrement": True},
    ),
}

# A NOT NULL column without a default cannot be added to an existing table as is; these
# are the neutral values legacy rows get for such a column (SQLite needs one even when the
# table is empty). On Postgres the default is dropped again afterwards.
_BACKFILL_DEFAULTS = {sa.Text: "''", sa.BigInteger: "0", sa.Integer: "0"}


# What makes a table one of ours: its primary key, the columns the older store created it
# with as NOT NULL without a default (they were there from its first release, and adoption
# could only invent values for them), and no column the older store never had (see
# ``_foreign_columns``). ``sessions`` needs no particular column besides its key: the older
# store itself left a bare ``sessions(session_key TEXT PRIMARY KEY)`` behind
# (docs/semantics.md#adoption), which is adopted; a web framework's
# ``sessions(session_key, session_data, expire_date)`` is not.
OUR_TABLE_SIGNATURES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "sessions": (("session_key",), ()),
    "transcript_entries": (
        ("id",),
        ("session_id", "session_key", "message_id", "role", "created_at"),
    ),
    "compacted_transcript_entries": (
        ("id",),
        ("session_id", "session_key", "message_id", "role", "created_at", "archived_at"),
    ),
    "session_summaries": (
        ("id",),
        ("session_id", "session_key", "summary_text", "created_at"),
    ),
    "session_context_states": (
        ("id",),
        ("session_id", "session_key", "state_kind", "created_at"),
    ),
}

# The columns the older store's V007 migration added to ``sessions``, back-filling them from
# ``estimated_cost_usd``.
_COST_SOURCE_COLUMNS = frozenset(
    {
        "total_cost_usd",
        "billed_cost_usd",
        "estimated_cost_component_usd",
        "cost_source",
        "missing_cost_entries",
    }
)


def upgrade() -> None:
    if context.is_offline_mode():
        _create_fresh_schema()
        return
    bind = op.get_bind()
    existing = set(sa.inspect(bind).get_table_names())
    _refuse_foreign_tables(bind, existing & set(TABLES))
    for name, (columns, indexes, options) in TABLES.items():
        if name in existing:
            _widen(bind, name, columns())
            _advance_id_sequence(bind, name)
        else:
            layout.create_table(bind, name, *columns(), **options)
        _ensure_indexes(bind, name, indexes)
    _ensure_epoch_guard(bind.dialect.name)


def downgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "postgresql":
        op.execute("DROP TRIGGER IF EXISTS prevent_epoch_rollback ON sessions")
        op.execute("DROP FUNCTION IF EXISTS opensquilla_prevent_epoch_rollback()")
    else:
        op.execute("DROP TRIGGER IF EXISTS prevent_epoch_rollback")
    for name in reversed(TABLES):
        op.drop_table(name)


def _create_fresh_schema() -> None:
    """The offline script (``--sql``): the schema of an empty database, nothing inspected."""
    migration = op.get_context()
    migration.impl.static_output(
        "-- opensquilla-session: this script creates the schema in an EMPTY database.\n"
        "-- Adopting an existing (legacy) database needs the live schema: run an online\n"
        "-- upgrade instead (alembic upgrade head, or opensquilla-session db upgrade)."
    )
    for name, (columns, indexes, options) in TABLES.items():
        op.create_table(name, *columns(), **options)
        for index, (indexed, unique) in indexes.items():
            op.create_index(index, name, indexed, unique=unique)
    _ensure_epoch_guard(migration.dialect.name)


def _shown(name: str) -> str:
    """A name read from someone else's schema, safe for a one-line message."""
    text = "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in name)
    return text if len(text) <= 64 else text[:64] + "..."


def _foreign_columns(table: str, columns: list[str]) -> list[str]:
    """The columns of ``table`` that no release of the older store created there.

    Every column the older store ever gave one of the five tables is one of the columns this
    revision declares (the union of both legacy revisions), so a table with any other column
    is not proven to be the older store's, however much its key looks like ours: adopting it
    would turn someone else's rows into sessions that ``prune`` or ``cap`` then delete."""
    ours = {column.name for column in TABLES[table][0]() if isinstance(column, sa.Column)}
    ours |= LATER_COLUMNS.get(table, frozenset())
    return [column for column in columns if column not in ours]


# Columns later revisions of this history add to the five tables: a database whose schema is
# complete but whose version row is gone (a restored backup) re-runs this revision and must
# be recognised as ours. A revision that adds a column to one of the five tables adds it
# here too (tests/migrations/test_adoption_safety.py checks it against the models).
LATER_COLUMNS: dict[str, frozenset[str]] = {
    # 0003, PostgreSQL only: the full-text search vector; 0009: per-entry metadata.
    "transcript_entries": frozenset({"search_vector", "metadata"}),
    "compacted_transcript_entries": frozenset({"metadata"}),
}


# Primary keys later revisions give the five tables: 0010, PostgreSQL, leads every child
# table's key with session_key (a database at head whose version row is gone re-runs this).
LATER_KEYS: dict[str, frozenset[tuple[str, ...]]] = {
    table: frozenset({("session_key", "id")})
    for table in (
        "transcript_entries",
        "compacted_transcript_entries",
        "session_summaries",
        "session_context_states",
    )
}


def _refuse_foreign_tables(bind: sa.engine.Connection, present: set[str]) -> None:
    """Refuse, before anything is written, a table that only shares one of our names."""
    inspector = sa.inspect(bind)
    problems = []
    for table in (name for name in TABLES if name in present):
        key, required = OUR_TABLE_SIGNATURES[table]
        columns = [column["name"] for column in inspector.get_columns(table)]
        primary = tuple(inspector.get_pk_constraint(table).get("constrained_columns") or ())
        wrong = []
        if primary != key and primary not in LATER_KEYS.get(table, frozenset()):
            ours = f"({', '.join(key)})"
            if primary:
                found = ", ".join(_shown(c) for c in primary)
                wrong.append(f"its primary key is ({found}), not {ours}")
            else:
                wrong.append(f"it has no primary key (ours is {ours})")
        absent = [column for column in required if column not in columns]
        if absent:
            wrong.append(f"it lacks column(s) {', '.join(absent)}")
        foreign = _foreign_columns(table, columns)
        if foreign:
            shown_foreign = ", ".join(_shown(c) for c in foreign[:6])
            more_foreign = f" and {len(foreign) - 6} more" if len(foreign) > 6 else ""
            wrong.append(
                f"it has column(s) {shown_foreign}{more_foreign} that the older store's "
                "table never had"
            )
        if wrong:
            shown = ", ".join(_shown(c) for c in columns[:12])
            more = f" and {len(columns) - 12} more" if len(columns) > 12 else ""
            problems.append(
                f"table {table} is not an opensquilla session table: {' and '.join(wrong)} "
                f"(its columns: {shown}{more})"
            )
    if problems:
        raise MigrationError(
            "; ".join(problems) + "; nothing was changed. Rename or move that table (it "
            "belongs to something else), or point opensquilla-session at another database"
        )


def _widen(bind: sa.engine.Connection, table: str, columns: list[Any]) -> None:
    reflected = {column["name"]: column for column in sa.inspect(bind).get_columns(table)}
    present = set(reflected)
    if bind.dialect.name == "postgresql":
        _convert_sqlite_style_types(table, columns, reflected)
    for column in columns:
        if not isinstance(column, sa.Column) or column.name in present:
            continue
        if column.nullable or column.server_default is not None:
            op.add_column(table, column)
            continue
        default = next(v for t, v in _BACKFILL_DEFAULTS.items() if isinstance(column.type, t))
        column.server_default = sa.schema.DefaultClause(sa.text(default))
        op.add_column(table, column)
        if bind.dialect.name == "postgresql":
            op.alter_column(table, column.name, server_default=None)
        if table == "sessions" and column.name == "session_id":
            _give_legacy_sessions_an_identity(bind)
        log.info(
            "adopted %s: added NOT NULL column %s (existing rows: %s)", table, column.name, default
        )
    if table == "sessions" and "epoch" in present:
        # The older store allowed NULL epochs before it made the column NOT NULL.
        sessions = sa.table("sessions", sa.column("epoch"))
        op.execute(sessions.update().where(sessions.c.epoch.is_(None)).values(epoch=0))
    if table == "sessions" and "estimated_cost_usd" in present and _COST_SOURCE_COLUMNS - present:
        _backfill_cost_source()


def _backfill_cost_source() -> None:
    """Rows older than the cost-source columns read back as the older store's own cost
    migration left them: a legacy ``estimated_cost_usd`` becomes both the total and the
    estimated component, marked ``opensquilla_estimate``. A row that already carries any
    other cost detail, or has no cost at all, is left alone. It runs only when adoption has
    just added some of those columns, so rows of a table that already had them are never
    touched."""
    op.execute(
        """
        UPDATE sessions
        SET total_cost_usd = estimated_cost_usd,
            estimated_cost_component_usd = estimated_cost_usd,
            cost_source = 'opensquilla_estimate'
        WHERE COALESCE(estimated_cost_usd, 0.0) > 0.0
          AND COALESCE(total_cost_usd, 0.0) = 0.0
          AND COALESCE(billed_cost_usd, 0.0) = 0.0
          AND COALESCE(estimated_cost_component_usd, 0.0) = 0.0
          AND COALESCE(missing_cost_entries, 0) = 0
        """
    )
    log.info("adopted sessions: back-filled the cost-source columns from estimated_cost_usd")


def _convert_sqlite_style_types(
    table: str, columns: list[Any], reflected: dict[str, dict[str, Any]]
) -> None:
    """A legacy table ported to Postgres with the older store's SQLite DDL keeps booleans in
    integers, JSON in text and millisecond timestamps in 32-bit integers; convert those
    columns in place (the rows and triggers stay)."""
    for column in columns:
        found = reflected.get(getattr(column, "name", None) or "")
        if found is None:
            continue
        actual = found["type"]
        if isinstance(column.type, sa.Boolean) and isinstance(actual, sa.Integer):
            op.alter_column(table, column.name, server_default=None)
            op.alter_column(
                table,
                column.name,
                type_=sa.Boolean(),
                existing_type=actual,
                postgresql_using=f'"{column.name}" <> 0',
            )
            op.alter_column(table, column.name, server_default=column.server_default.arg)
        elif (
            isinstance(column.type, sa.BigInteger)
            and isinstance(actual, sa.Integer)
            and not isinstance(actual, sa.BigInteger)
        ):
            # Millisecond timestamps do not fit a 32-bit integer.
            op.alter_column(table, column.name, type_=sa.BigInteger(), existing_type=actual)
            if column.name == "id":
                _widen_id_sequence(table)
        elif column.type is JSON and isinstance(actual, sa.String | sa.Text):
            default = column.server_default
            if default is not None:
                op.alter_column(table, column.name, server_default=None)
            op.alter_column(
                table,
                column.name,
                type_=postgresql.JSONB(astext_type=sa.Text()),
                existing_type=actual,
                postgresql_using=f"NULLIF(\"{column.name}\", '')::jsonb",
            )
            if default is not None:
                op.alter_column(table, column.name, server_default=default.arg)


def _widen_id_sequence(table: str) -> None:
    """A SERIAL's sequence is ``AS integer``; widen it with its column. The name comes
    from the catalog (``pg_get_serial_sequence`` returns it quoted as needed)."""
    bind = op.get_bind()
    sequence = bind.execute(
        sa.text("SELECT pg_get_serial_sequence(:t, 'id')"), {"t": table}
    ).scalar()
    if sequence is not None:
        op.execute(sa.text(f"ALTER SEQUENCE {sequence} AS bigint"))


def _advance_id_sequence(bind: sa.engine.Connection, table: str) -> None:
    """Rows ported to Postgres with their ids (which other rows refer to) leave the id
    sequence behind them; move it past the largest id, never backwards, so new rows neither
    collide with nor reuse a legacy id."""
    if bind.dialect.name != "postgresql" or table == "sessions":
        return
    sequence = bind.execute(
        sa.text("SELECT pg_get_serial_sequence(:t, 'id')"), {"t": table}
    ).scalar()
    highest = bind.execute(sa.select(sa.func.max(sa.column("id"))).select_from(sa.table(table)))
    top = highest.scalar()
    if sequence is None or top is None:
        return
    # ``pg_sequences.last_value`` is NULL for a sequence never used; GREATEST skips NULLs.
    bind.execute(
        sa.text(
            "SELECT setval(CAST(:s AS regclass), GREATEST(:top, ("
            "SELECT last_value FROM pg_sequences "
            "WHERE CAST(format('%I.%I', schemaname, sequencename) AS regclass)"
            " = CAST(:s AS regclass))))"
        ),
        {"s": sequence, "top": top},
    )


def _give_legacy_sessions_an_identity(bind: sa.engine.Connection) -> None:
    sessions = sa.table("sessions", sa.column("session_key"), sa.column("session_id"))
    keys = bind.execute(sa.select(sessions.c.session_key)).scalars().all()
    for key in keys:
        bind.execute(
            sessions.update()
            .where(sessions.c.session_key == key)
            .values(session_id=str(uuid.uuid4()))
        )


def _ensure_indexes(
    bind: sa.engine.Connection, table: str, indexes: dict[str, tuple[list[str], bool]]
) -> None:
    present = {index["name"] for index in sa.inspect(bind).get_indexes(table)}
    for name, (columns, unique) in indexes.items():
        if name in present:
            continue
        if unique and _has_duplicates(bind, table, columns):
            log.warning(
                "not creating unique index %s: %s already holds duplicate (%s) rows; "
                "compaction indexes are still assigned inside the write transaction",
                name,
                table,
                ", ".join(columns),
            )
            continue
        layout.create_index(bind, name, table, columns, unique=unique)


def _has_duplicates(bind: sa.engine.Connection, table: str, columns: list[str]) -> bool:
    t = sa.table(table, *(sa.column(c) for c in columns))
    keys = [t.c[c] for c in columns]
    query = sa.select(*keys).group_by(*keys).having(sa.func.count() > 1).limit(1)
    return bind.execute(query).first() is not None


def _ensure_epoch_guard(dialect: str) -> None:
    """A trigger that refuses any UPDATE lowering ``sessions.epoch`` (docs/semantics.md#fencing)."""
    if dialect == "postgresql":
        op.execute(
            """
            CREATE OR REPLACE FUNCTION opensquilla_prevent_epoch_rollback() RETURNS trigger
            LANGUAGE plpgsql AS $$
            BEGIN
                RAISE EXCEPTION 'epoch can only increase'
                    USING ERRCODE = 'integrity_constraint_violation';
            END
            $$
            """
        )
        op.execute(
            """
            CREATE OR REPLACE TRIGGER prevent_epoch_rollback
            BEFORE UPDATE OF epoch ON sessions
            FOR EACH ROW WHEN (NEW.epoch < OLD.epoch)
            EXECUTE FUNCTION opensquilla_prevent_epoch_rollback()
            """
        )
    else:
        op.execute(
            """
            CREATE TRIGGER IF NOT EXISTS prevent_epoch_rollback
            BEFORE UPDATE OF epoch ON sessions
            WHEN NEW.epoch < OLD.epoch
            BEGIN
                SELECT RAISE(ABORT, 'epoch can only increase');
            END
            """
        )
