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
search indexes are built with, which revision 0003 names by the schema the extension lives in.
"""

from __future__ import annotations

import re
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ..errors import ConfigurationError

# Lower case, as PostgreSQL folds unquoted names: the name given is the name in the catalog.
_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")
_RESERVED = ("pg_", "information_schema")


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
