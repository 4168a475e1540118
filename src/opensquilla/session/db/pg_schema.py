"""A PostgreSQL schema for the store (``?schema=NAME`` or ``SessionStorage(..., schema=NAME)``).

Every connection of such a store has ``search_path`` set to that schema alone (at connection
start, ``db/engine.py``), and its statements carry a ``schema_translate_map`` naming it: the
tables, indexes, sequences, functions and triggers the revisions create (their raw SQL
included), the rows the store reads and writes, and its version table all live there. The
search path holds nothing else on purpose: the migrations inspect the live schema to adopt
what is there, and a second schema on the path would show them another store's tables (or
an application's ``sessions``) wherever ours are missing.

Two things live outside: the ``pg_trgm`` extension (one per database; revision 0003 creates
it in the store's schema when the database has none) and the trigram operator class the
search indexes are built with, which a migration names by the schema the extension lives in
(:func:`trigram_opclass_qualified`).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Connection

from ..errors import ConfigurationError

# Lower case, as PostgreSQL folds unquoted names: the name given is the name in the catalog.
_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")
_RESERVED = ("pg_", "information_schema")
_TRGM_OPCLASS = re.compile(r'(?<![\w."])gin_trgm_ops\b')


def checked_schema(name: object) -> str:
    """``name`` if it is a usable schema name, else a ``ConfigurationError`` saying why."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ConfigurationError(
            f"schema must be a PostgreSQL name of lower-case letters, digits and underscores "
            f"(at most 63, not starting with a digit), not {name!r}"[:200]
        )
    if name.startswith(_RESERVED):
        raise ConfigurationError(f"schema {name!r} is reserved by PostgreSQL; choose another")
    return name


def connection_settings(schema: str) -> dict[str, Any]:
    """asyncpg ``connect()`` arguments putting ``schema`` alone on the search path."""
    return {"server_settings": {"search_path": f'"{schema}"'}}


def ensure_schema(connection: Connection, schema: str) -> None:
    """Create ``schema`` if it does not exist (checked first: ``CREATE SCHEMA IF NOT EXISTS``
    needs the CREATE privilege on the database even when the schema is there)."""
    present = connection.scalar(
        sa.text("SELECT 1 FROM pg_namespace WHERE nspname = :name"), {"name": schema}
    )
    if not present:
        connection.exec_driver_sql(f'CREATE SCHEMA "{schema}"')


def trigram_schema(connection: Connection) -> str | None:
    """The schema ``pg_trgm`` is installed in (``None``: not installed)."""
    found = connection.scalar(
        sa.text(
            "SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace "
            "WHERE e.extname = 'pg_trgm'"
        )
    )
    return str(found) if found is not None else None


@contextlib.contextmanager
def trigram_opclass_qualified(connection: Connection, where: str | None) -> Iterator[None]:
    """While a migration runs, name ``gin_trgm_ops`` by the schema ``pg_trgm`` lives in.

    Revision 0003 builds its trigram indexes with the bare name, which PostgreSQL looks up
    on the search path; a store's search path holds its own schema only, and the extension
    is usually in ``public`` (or in another store's schema). Qualifying the name finds the
    one operator class wherever it is. ``where`` is :func:`trigram_schema`, read before
    the run; without the extension (0003 creates it, in the store's schema, which is on
    the path) nothing is rewritten."""
    if where is None:
        yield
        return
    qualified = f'"{where}".gin_trgm_ops'

    def qualify(
        _conn: Connection, _cursor: Any, statement: str, parameters: Any, *_: Any
    ) -> tuple[str, Any]:
        if "gin_trgm_ops" in statement:
            statement = _TRGM_OPCLASS.sub(qualified, statement)
        return statement, parameters

    event.listen(connection, "before_cursor_execute", qualify, retval=True)
    try:
        yield
    finally:
        event.remove(connection, "before_cursor_execute", qualify)
