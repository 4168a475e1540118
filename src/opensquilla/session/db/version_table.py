"""Where the store records its schema revision: its own version table.

Alembic's default ``alembic_version`` belongs to whichever Alembic history reaches a database
first; an application sharing the database with the store has its own history there, and
two histories in one version table read each other's revisions as unknown. The store
therefore records its revision in :data:`VERSION_TABLE` (in the store's PostgreSQL schema
when one is set, ``db/pg_schema.py``), and reads nothing else.

Releases before this one wrote ``alembic_version``. Such a database moves over on the next
migration run (``connect()``, ``db upgrade``), inside the migration lock: rows holding one of
our revision ids are copied into our table (unless it already has a row) and deleted from
``alembic_version``, which is dropped only if nothing else is left in it. Rows of any other
revision (an application's) are never touched. Until it has moved, a read-only look
(``db current``, ``db check``) reports the revision found there.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from typing import Any

import sqlalchemy as sa
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Connection

log = logging.getLogger("opensquilla.session.migrate")

VERSION_TABLE = "opensquilla_session_version"
SHARED_VERSION_TABLE = "alembic_version"  # Alembic's default, where earlier releases wrote


def schema_of(connection: Connection) -> str | None:
    """The PostgreSQL schema the store's tables live in (``None``: the default one)."""
    translate = connection.get_execution_options().get("schema_translate_map") or {}
    schema = translate.get(None)
    return schema if isinstance(schema, str) else None


def version_options(schema: str | None) -> dict[str, Any]:
    """The Alembic options naming the store's version table (for every context)."""
    return {"version_table": VERSION_TABLE, "version_table_schema": schema}


def migration_context(connection: Connection) -> MigrationContext:
    return MigrationContext.configure(connection, opts=version_options(schema_of(connection)))


def _shared_table(schema: str | None) -> sa.TableClause:
    return sa.table(SHARED_VERSION_TABLE, sa.column("version_num", sa.String(32)), schema=schema)


def ours_in_shared_table(connection: Connection, known: Collection[str]) -> tuple[str, ...]:
    """Our revision ids still recorded in ``alembic_version`` (next to the store's tables)."""
    schema = schema_of(connection)
    if not sa.inspect(connection).has_table(SHARED_VERSION_TABLE, schema=schema):
        return ()
    rows = connection.execute(sa.select(_shared_table(schema).c.version_num)).scalars()
    return tuple(sorted(revision for revision in rows if revision in known))


def current_revisions(connection: Connection, known: Collection[str]) -> tuple[str, ...]:
    """The store's revision: its own table's, else the one still in ``alembic_version``."""
    ours = tuple(migration_context(connection).get_current_heads())
    return ours or ours_in_shared_table(connection, known)


def move_from_shared_table(connection: Connection, script: ScriptDirectory) -> tuple[str, ...]:
    """Move our rows out of ``alembic_version`` into :data:`VERSION_TABLE`; idempotent.

    Runs inside the migration lock. Returns the revisions moved (empty when none were
    there)."""
    known = {revision.revision for revision in script.walk_revisions()}
    moved = ours_in_shared_table(connection, known)
    if not moved:
        return ()
    context = migration_context(connection)
    if not context.get_current_heads():
        for revision in moved:
            context.stamp(script, revision)
    schema = schema_of(connection)
    shared = _shared_table(schema)
    connection.execute(sa.delete(shared).where(shared.c.version_num.in_(moved)))
    if connection.scalar(sa.select(sa.func.count()).select_from(shared)) == 0:
        sa.Table(SHARED_VERSION_TABLE, sa.MetaData(), schema=schema).drop(connection)
    log.info(
        "moved revision %s from %s to %s",
        ", ".join(moved),
        SHARED_VERSION_TABLE,
        VERSION_TABLE,
        extra={"operation": "migrate"},
    )
    return moved


def why_no_store(
    connection: Connection, known: Collection[str], tables: Collection[str]
) -> str | None:
    """Why the database holds no store (``None``: it holds one, perhaps a legacy one to
    adopt): neither a revision of ours nor any of the store's tables."""
    if current_revisions(connection, known):
        return None
    schema = schema_of(connection)
    inspector = sa.inspect(connection)
    if any(inspector.has_table(table, schema=schema) for table in tables):
        return None
    reason = f"it has no {VERSION_TABLE} table and none of the store's tables"
    if inspector.has_table(SHARED_VERSION_TABLE, schema=schema):
        shared = _shared_table(schema).c.version_num
        others = connection.execute(sa.select(shared)).scalars().all()
        if others:
            reason += (
                f"; its {SHARED_VERSION_TABLE} holds revision {', '.join(sorted(others))}, "
                "another Alembic history's (an application sharing the database)"
            )
    return reason
