"""How the schema is compared with the code's metadata: the hooks every migration context
gets (from the command line or from code), and what is, or is not, drift (``migrate.check``
reports it).
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic.runtime.migration import MigrationContext
from sqlalchemy.engine import Connection

from .base import Base
from .layout import PARTITIONED_KEYS
from .schema_policy import record_revision_policy
from .tables import OUR_TABLES
from .version_table import version_options

# The PostgreSQL objects of revisions 0003 and 0009, which the metadata does not declare: a
# column and indexes only one backend has (SQLite's FTS5 tables are not ours to compare).
SEARCH_OBJECTS = frozenset(
    {
        "search_vector",
        "ix_transcript_entries_search_vector",
        "ix_transcript_entries_content_trgm",
        "ix_compacted_transcript_entries_search_vector",
        "ix_compacted_transcript_entries_content_trgm",
        # Revision 0009's prefix index, on an expression (``session_key COLLATE "C"``)
        # PostgreSQL alone needs: SQLite's key index already compares bytes.
        "idx_sessions_key_prefix",
    }
)


# What PostgreSQL has beyond the metadata since revision 0010 (docs/scaling.md): every key of
# a session's rows leads with ``session_key``, the column a distributed PostgreSQL shards by
# and a partitioned one partitions by. The metadata keeps SQLite's keys (its row ids are
# ``INTEGER PRIMARY KEY AUTOINCREMENT``, which a composite key would lose), and Alembic does
# not compare primary keys, so these are checked here (:func:`postgres_key_drift`), the
# unique index by its columns instead of by Alembic's comparison.
POSTGRES_PRIMARY_KEYS: dict[str, tuple[str, ...]] = PARTITIONED_KEYS
POSTGRES_UNIQUE_INDEXES: dict[str, tuple[str, ...]] = {
    # The id by its md5: at the longest key and id the store allows (512 and 256 characters
    # of up to 4 bytes), the key and the id together pass btree's 2,704-byte entry limit.
    "uq_summaries_session_compaction_index": (
        "session_key",
        "md5(session_id)",
        "compaction_index",
    ),
}

_KEY_QUERY = sa.text(
    "SELECT cl.relname, array(SELECT a.attname::text FROM unnest(i.indkey) "
    "WITH ORDINALITY AS k(attnum, n) JOIN pg_catalog.pg_attribute a "
    "ON a.attrelid = i.indrelid AND a.attnum = k.attnum ORDER BY k.n), i.indisprimary "
    "FROM pg_catalog.pg_index i JOIN pg_catalog.pg_class cl ON cl.oid = i.indrelid "
    "JOIN pg_catalog.pg_class ix ON ix.oid = i.indexrelid "
    "WHERE cl.relnamespace = to_regnamespace(coalesce(:schema, current_schema())) "
    "AND (i.indisprimary OR ix.relname = ANY(:names))"
)
# Each key element as PostgreSQL prints it: a column's name, or an expression (``md5(...)``).
_INDEX_NAME_QUERY = sa.text(
    "SELECT ix.relname, array(SELECT pg_catalog.pg_get_indexdef(i.indexrelid, n, true) "
    "FROM generate_series(1, i.indnkeyatts) AS n ORDER BY n) "
    "FROM pg_catalog.pg_index i JOIN pg_catalog.pg_class ix ON ix.oid = i.indexrelid "
    "WHERE ix.relnamespace = to_regnamespace(coalesce(:schema, current_schema())) "
    "AND ix.relname = ANY(:names)"
)


def postgres_key_drift(connection: Connection, schema: str | None) -> list[str]:
    """On PostgreSQL, the differences between the database's keys and
    :data:`POSTGRES_PRIMARY_KEYS` / :data:`POSTGRES_UNIQUE_INDEXES` (tables absent are the
    ordinary comparison's to report); elsewhere none."""
    if connection.dialect.name != "postgresql":
        return []
    names = list(POSTGRES_UNIQUE_INDEXES)
    params = {"schema": schema, "names": names}
    primary = {
        str(table): tuple(columns)
        for table, columns, is_primary in connection.execute(_KEY_QUERY, params)
        if is_primary
    }
    drift = [
        f"primary_key {table} ({', '.join(primary[table])}) != ({', '.join(wanted)})"
        for table, wanted in POSTGRES_PRIMARY_KEYS.items()
        if table in primary and primary[table] != wanted
    ]
    found = {str(n): tuple(c) for n, c in connection.execute(_INDEX_NAME_QUERY, params)}
    drift += [
        f"unique_index {name} ({', '.join(found[name])}) != ({', '.join(wanted)})"
        for name, wanted in POSTGRES_UNIQUE_INDEXES.items()
        if name in found and found[name] != wanted
    ]
    return drift


def include_object(
    obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any
) -> bool:
    """Only our five tables: the rest of opensquilla keeps its own tables in the same file.
    The search objects of revision 0003 are not modelled (they belong to one backend each)."""
    if name in SEARCH_OBJECTS:
        return False
    if type_ == "table":
        return name in OUR_TABLES
    table = getattr(obj, "table", None)
    return table is None or table.name in OUR_TABLES


# SQLite stores values by type *affinity*: a legacy ``INTEGER`` column holds what our
# ``BIGINT`` or ``BOOLEAN`` would, and ``TEXT`` holds our ``JSON``. Such pairs are not drift.
_SQLITE_AFFINITY = {
    "INTEGER": "INTEGER",
    "BIGINT": "INTEGER",
    "SMALLINT": "INTEGER",
    "BOOLEAN": "INTEGER",
    "TEXT": "TEXT",
    "VARCHAR": "TEXT",
    "JSON": "TEXT",
    "REAL": "REAL",
    "FLOAT": "REAL",
    "DOUBLE": "REAL",
    "DOUBLE PRECISION": "REAL",
}


def _include_postgres_object(
    obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any
) -> bool:
    """:func:`include_object`, PostgreSQL's keys left to :func:`postgres_key_drift`."""
    if type_ == "index" and name in POSTGRES_UNIQUE_INDEXES:
        return False
    return include_object(obj, name, type_, reflected, compare_to)


def _affinity(type_: Any, dialect: Any) -> str | None:
    try:
        name = str(type_.compile(dialect=dialect)).split("(")[0].strip().upper()
    except Exception:
        return None
    return _SQLITE_AFFINITY.get(name)


def compare_type(
    context: MigrationContext,
    inspected_column: Any,
    metadata_column: Any,
    inspected_type: Any,
    metadata_type: Any,
) -> bool | None:
    """Alembic hook: on SQLite, equal type affinity is no difference; else the default."""
    dialect = context.dialect
    if dialect.name != "sqlite":
        return None
    left, right = _affinity(inspected_type, dialect), _affinity(metadata_type, dialect)
    if left is not None and left == right:
        return False
    return None


def drop_sqlite_pk_nullability(context: MigrationContext, revision: Any, directives: Any) -> None:
    """Legacy SQLite tables declare ``TEXT PRIMARY KEY`` / ``INTEGER PRIMARY KEY`` without
    ``NOT NULL`` (a rowid alias can never be NULL); such a difference is not drift."""
    if context.dialect.name != "sqlite" or not directives:
        return
    upgrade_ops = directives[0].upgrade_ops
    kept = []
    for table_ops in upgrade_ops.ops:
        table = Base.metadata.tables.get(getattr(table_ops, "table_name", ""))
        inner = getattr(table_ops, "ops", None)
        if table is not None and inner is not None:
            table_ops.ops = [
                op
                for op in inner
                if not (
                    getattr(op, "modify_nullable", None) is not None
                    and getattr(op, "modify_type", None) is None
                    and op.column_name in table.c
                    and table.c[op.column_name].primary_key
                )
            ]
            if not table_ops.ops:
                continue
        kept.append(table_ops)
    upgrade_ops.ops = kept


def context_options(dialect_name: str, schema: str | None) -> dict[str, Any]:
    """Options every migration context gets, from the CLI or from code."""
    return {
        **version_options(schema),
        "target_metadata": Base.metadata,
        "render_as_batch": dialect_name == "sqlite",
        "include_object": (
            _include_postgres_object if dialect_name == "postgresql" else include_object
        ),
        "compare_type": compare_type,
        "process_revision_directives": drop_sqlite_pk_nullability,
        "on_version_apply": record_revision_policy,
    }


def describe(diff: Any) -> str:
    if isinstance(diff, tuple) and diff and isinstance(diff[0], str):
        parts = [diff[0]]
        for item in diff[1:]:
            name = getattr(item, "name", None)
            parts.append(str(name) if name is not None else str(item))
        return " ".join(parts)
    if isinstance(diff, list):
        return "; ".join(describe(item) for item in diff)
    return str(diff)
