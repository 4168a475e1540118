"""Alembic environment for opensquilla-session.

Two ways in:

* from code (``SessionStorage.connect()``, the ``db`` CLI commands): ``db/migrate.py`` opens a
  connection, takes the migration lock, and passes the connection in
  ``config.attributes["connection"]`` (Alembic's connection-sharing recipe);
* from the ``alembic`` command line: the DSN comes from ``-x dsn=...`` or the
  ``OPENSQUILLA_SESSION_DSN`` environment variable, and ``db/migrate.py`` does the same locking.

The revision is recorded in the store's own version table (``db/version_table.py``), in the
store's PostgreSQL schema when the DSN names one (``?schema=``, ``db/pg_schema.py``).
"""

from __future__ import annotations

from logging.config import fileConfig

from sqlalchemy.engine import Connection

from alembic import context
from opensquilla.session.db import alembic_cli, migrate
from opensquilla.session.db.dsn import parse_target
from opensquilla.session.db.version_table import schema_of

config = context.config

# The checkout's alembic.ini configures logging; a minimal ini that only names the packaged
# scripts (``script_location = opensquilla.session:_alembic``, docs/deploying.md) does not.
if (
    config.config_file_name is not None
    and config.attributes.get("connection") is None
    and config.file_config.has_section("loggers")
):
    fileConfig(config.config_file_name, disable_existing_loggers=False)


def run_migrations(connection: Connection) -> None:
    options = migrate.context_options(connection.dialect.name, schema_of(connection))
    context.configure(connection=connection, **options)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_offline() -> None:
    target = parse_target(alembic_cli.cli_dsn(context.get_x_argument(as_dictionary=True)))
    url = target.url
    context.configure(
        url=url,
        literal_binds=True,
        dialect_opts={"paramstyle": "named"},
        # The script is one transaction on SQLite too (BEGIN ... COMMIT), so a failing
        # statement leaves no half-built schema behind.
        transactional_ddl=True,
        **migrate.context_options(url.get_backend_name(), target.schema),
    )
    with context.begin_transaction():
        if target.schema is not None:
            # The script is for an empty schema (nothing is inspected), so ``public`` may
            # follow it on the path: the trigram operator class is usually there.
            context.execute(f'CREATE SCHEMA IF NOT EXISTS "{target.schema}"')
            context.execute(f'SET LOCAL search_path TO "{target.schema}", public')
        context.run_migrations()


if context.is_offline_mode():
    # Offline (``--sql``) the script is written for an empty database (adoption needs the
    # live schema); an unusable DSN or a refusal is one ``FAILED:`` line, not a traceback.
    with alembic_cli.cli_errors():
        run_migrations_offline()
elif (shared := config.attributes.get("connection")) is not None:
    run_migrations(shared)
else:
    alembic_cli.run_from_cli(context.get_x_argument(as_dictionary=True), run_migrations)
