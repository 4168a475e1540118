"""The table layout of a PostgreSQL store: ``plain`` or ``partitioned:N`` (docs/scaling.md).

``partitioned:N`` creates every session-owned table hash-partitioned by ``session_key`` into
``N`` partitions (``<table>_p<i> PARTITION OF <table> FOR VALUES WITH (MODULUS N, REMAINDER
i)``), with the keys revision 0010 gives a plain database (``(session_key, id)``): PostgreSQL
enforces there the rule a distributed PostgreSQL (Citus) has, that every primary key and
unique constraint include the distribution column. It is chosen once, when the tables are
created (``db upgrade --layout``, or the storage's ``layout=`` setting, on an EMPTY
database); afterwards it is read from the catalog (``pg_class.relkind = 'p'`` of
``sessions``), never from a flag. Converting a plain database is out of scope.

The revisions that create tables or indexes ask this module how (:func:`create_table`,
:func:`create_index`, :func:`concurrent_indexes`): on a partitioned database a table is
created partitioned with its final key, an index plainly (``CONCURRENTLY`` cannot build one
on a partitioned parent; the tables are empty then, so a plain build is instant), and the
global unique index on ``sessions.session_id``, impossible there, is a non-unique one.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ..errors import ConfigurationError

DEFAULT_PARTITIONS = 16
MAX_PARTITIONS = 1024

# The session-owned tables and the primary key each gets when partitioned (the same keys
# revision 0010 gives a plain database; scope_states is not a session's: never partitioned).
PARTITIONED_KEYS: dict[str, tuple[str, ...]] = {
    "sessions": ("session_key",),
    "transcript_entries": ("session_key", "id"),
    "compacted_transcript_entries": ("session_key", "id"),
    "session_summaries": ("session_key", "id"),
    "session_context_states": ("session_key", "id"),
    "session_archives": ("session_key", "id"),
    "canonical_archive_counts": ("session_key", "id"),
    "session_states": ("session_key",),
    "compaction_leases": ("session_key",),
}

# Unique indexes a partitioned table cannot have (they lack session_key): what it gets instead.
# ``sessions.session_id`` stays unique by the store's own checks (a generated uuid4; import
# and copy refuse an id another key owns).
SESSION_ID_INDEX = "uq_sessions_session_id"
PARTITIONED_SESSION_ID_INDEX = "idx_sessions_session_id"


@dataclass(frozen=True)
class Layout:
    """``partitions == 0``: plain tables; else hash-partitioned into that many."""

    partitions: int = 0
    # From $OPENSQUILLA_SESSION_LAYOUT: applies to a new database only, never refuses one.
    soft: bool = field(default=False, compare=False)

    @property
    def partitioned(self) -> bool:
        return self.partitions > 0

    def __str__(self) -> str:
        return f"partitioned:{self.partitions}" if self.partitioned else "plain"


PLAIN = Layout()
LAYOUT_ENV = "OPENSQUILLA_SESSION_LAYOUT"


def configured(value: object) -> Layout | None:
    """The ``layout=`` setting: checked here; unset, ``$OPENSQUILLA_SESSION_LAYOUT`` (read
    now), which lays out a new database only and leaves an existing one as it is."""
    if value is not None:
        return parse(value)
    text = os.environ.get(LAYOUT_ENV, "").strip()
    found = parse(text, given_as=f"${LAYOUT_ENV}") if text else None
    return None if found is None else Layout(found.partitions, soft=True)


def parse(value: object, *, given_as: str = "layout") -> Layout | None:
    """``None``/``"plain"``/``"partitioned"``/``"partitioned:N"`` (or a :class:`Layout`);
    anything else a :class:`ConfigurationError` naming ``given_as``."""
    if value is None or isinstance(value, Layout):
        return value
    if not isinstance(value, str):
        raise ConfigurationError(
            f"{given_as} must be 'plain' or 'partitioned[:N]', not {type(value).__name__}"
        )
    text = value.strip().lower()
    if text == "plain":
        return PLAIN
    kind, _, count = text.partition(":")
    if kind == "partitioned":
        if not count:
            return Layout(DEFAULT_PARTITIONS)
        if count.isdigit() and 2 <= int(count) <= MAX_PARTITIONS:
            return Layout(int(count))
    raise ConfigurationError(
        f"{given_as} must be 'plain' or 'partitioned[:N]' with N from 2 to {MAX_PARTITIONS} "
        f"(default {DEFAULT_PARTITIONS}), not {value[:60]!r}"
    )


_DETECT = sa.text(
    "SELECT c.relkind::text, (SELECT count(*) FROM pg_catalog.pg_inherits i "
    "WHERE i.inhparent = c.oid) FROM pg_catalog.pg_class c "
    "WHERE c.oid = to_regclass('sessions')"
)


def detect(connection: Connection) -> Layout | None:
    """The layout of the store's tables from the catalog; ``None`` when ``sessions`` is
    absent (a new database). SQLite is always plain."""
    if connection.dialect.name != "postgresql":
        return PLAIN if sa.inspect(connection).has_table("sessions") else None
    row = connection.execute(_DETECT).first()
    if row is None:
        return None
    return Layout(int(row[1])) if row[0] == "p" else PLAIN


def resolve(connection: Connection, requested: Layout | None, our_tables: Sequence[str]) -> Layout:
    """The layout a migration run builds: the database's own once it has tables, else the
    one requested (plain by default). A request the database cannot honour is refused."""
    found = detect(connection)
    if requested is None or (requested.soft and found is not None):
        return found or PLAIN
    if requested.partitioned and connection.dialect.name != "postgresql":
        raise ConfigurationError(
            f"layout {requested} needs PostgreSQL (hash partitioning); SQLite has one layout, plain"
        )
    if found is None:
        present = set(sa.inspect(connection).get_table_names()) & set(our_tables)
        if present and requested.soft:
            return PLAIN
        if present and requested.partitioned:
            raise ConfigurationError(_not_empty(requested, sorted(present)))
        return requested
    if found != requested:
        if requested.partitioned and not found.partitioned:
            raise ConfigurationError(_not_empty(requested, ["sessions"]))
        raise ConfigurationError(
            f"this database's tables have layout {found}, not the {requested} asked for; a "
            "layout is chosen once, when the tables are created"
        )
    return found


def _not_empty(requested: Layout, tables: list[str]) -> str:
    return (
        f"layout {requested} is created on an empty database only, and this one already "
        f"has the store's table(s) {', '.join(tables)}; converting a plain database is not "
        "supported (docs/scaling.md#the-partitioned-layout): create the partitioned one "
        "empty and copy the sessions over (opensquilla-session export/import)"
    )


_PLAIN_TABLES = sa.text(
    "SELECT c.relname FROM pg_catalog.pg_class c WHERE c.relname = ANY(:names) "
    "AND c.relkind <> 'p' AND pg_catalog.pg_table_is_visible(c.oid)"
)


def drift(connection: Connection, found: list[str]) -> list[str]:
    """The drift check's findings (``migrate.check``) for the database's layout: on a
    partitioned one the session id's non-unique stand-in is expected (and the unique index
    absent), and a session-owned table that is not partitioned is drift."""
    current = detect(connection)
    if current is None or not current.partitioned:
        return found
    expected = {f"remove_index {PARTITIONED_SESSION_ID_INDEX}", f"add_index {SESSION_ID_INDEX}"}
    kept = [item for item in found if item not in expected]
    if f"remove_index {PARTITIONED_SESSION_ID_INDEX}" not in found:
        kept.append(f"missing_index {PARTITIONED_SESSION_ID_INDEX}")
    names = list(PARTITIONED_KEYS)
    kept += [
        f"unpartitioned_table {name}"
        for (name,) in connection.execute(_PLAIN_TABLES, {"names": names})
    ]
    return kept


# -- for the revisions -------------------------------------------------------------------


def active(connection: Connection | None) -> Layout:
    """The layout a running revision builds: the catalog's once ``sessions`` exists, else
    the one the migration run was given (``config.attributes['layout']``)."""
    if connection is None or connection.dialect.name != "postgresql":
        return PLAIN
    found = detect(connection)
    if found is not None:
        return found
    from alembic import context

    config = getattr(context, "config", None)
    given = None if config is None else config.attributes.get("layout")
    return given if isinstance(given, Layout) else PLAIN


def _partitioned_table(connection: Connection | None, table: str) -> int:
    """How many partitions ``table`` is to have (0: a plain table)."""
    if table not in PARTITIONED_KEYS:
        return 0
    return active(connection).partitions


def create_table(connection: Connection | None, name: str, *items: Any, **options: Any) -> None:
    """``op.create_table``, partitioned by ``session_key`` with its final key on a
    partitioned database."""
    from alembic import op

    partitions = _partitioned_table(connection, name)
    if not partitions:
        op.create_table(name, *items, **options)
        return
    kept: list[Any] = []
    for item in items:
        if isinstance(item, sa.PrimaryKeyConstraint):
            continue
        if isinstance(item, sa.Column) and item.primary_key:
            item.primary_key = False
            item.nullable = False
        kept.append(item)
    key = sa.PrimaryKeyConstraint(*PARTITIONED_KEYS[name], name=op.f(f"pk_{name}"))
    op.create_table(name, *kept, key, postgresql_partition_by="HASH (session_key)", **options)
    for i in range(partitions):
        op.execute(
            f"CREATE TABLE {name}_p{i} PARTITION OF {name} "
            f"FOR VALUES WITH (MODULUS {partitions}, REMAINDER {i})"
        )


def create_index(
    connection: Connection | None,
    name: str,
    table: str,
    columns: list[str],
    *,
    unique: bool = False,
    **options: Any,
) -> None:
    """``op.create_index``; on a partitioned table a unique index includes ``session_key``
    (``uq_sessions_session_id`` becomes the non-unique ``idx_sessions_session_id``)."""
    from alembic import op

    if unique and "session_key" not in columns and _partitioned_table(connection, table):
        if name == SESSION_ID_INDEX:
            name, unique = PARTITIONED_SESSION_ID_INDEX, False
        else:
            columns = ["session_key", *columns]
    op.create_index(name, table, columns, unique=unique, **options)


def is_partitioned(connection: Connection, table: str) -> bool:
    """Whether ``table`` is a partitioned parent (PostgreSQL's ``relkind = 'p'``)."""
    kind = connection.scalar(
        sa.text("SELECT relkind::text FROM pg_catalog.pg_class WHERE oid = to_regclass(:t)"),
        {"t": table},
    )
    return bool(kind == "p")


def concurrent_indexes(connection: Connection | None) -> bool:
    """Whether a revision may build its indexes ``CONCURRENTLY`` (not on a partitioned
    database, where its tables are partitioned parents)."""
    return not active(connection).partitioned
