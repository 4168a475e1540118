"""SQLite: bound the FTS5 indexes' in-memory pending data (64 KiB instead of 1 MiB)

FTS5 gathers the terms of a transaction in a hash table kept on the connection and writes
them out at commit, or earlier once they reach the ``hashsize`` setting (1 MiB by default).
The table grows to fit the largest transaction the connection ever ran and never shrinks,
and every later commit on that connection clears and scans all of it. A pooled connection
that once ran a big write (a compaction folding thousands of rows into the archive, an
import, the rebuild of revision 0003) made each later append on it about 90 µs slower on
this machine kind, for as long as the connection lived (bench/search.py, docs/search.md).
With ``hashsize`` at 64 KiB a big transaction writes its terms out in pieces as it goes,
the table stays small, and appends cost the same on every connection.

The setting is a row in each index's ``*_config`` table (``transcript_fts`` and
``compacted_transcript_fts``), written through FTS5's own configuration command, so every
connection, the older store's included, picks it up; the tables' DDL is unchanged. An
SQLite too old to know the setting leaves it out with a warning: only speed depends on it.

PostgreSQL: nothing (its search objects are ordinary indexes).

The revision is expand-only. Downgrade removes the two rows (first setting the default
again, so that connections already open reload it).

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

# ruff: noqa: S608 (the names are this file's constants)

from __future__ import annotations

import logging
from collections.abc import Sequence

import sqlalchemy as sa

from alembic import context, op

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

expand_only = True

INDEXES = ("transcript_fts", "compacted_transcript_fts")
SETTING = "hashsize"
BOUND = 64 * 1024
FTS5_DEFAULT = 1024 * 1024

log = logging.getLogger("alembic.runtime.migration")


def _configure(index: str, value: int) -> str:
    return f"INSERT INTO {index}({index}, rank) VALUES ('{SETTING}', {value})"


def upgrade() -> None:
    if op.get_context().dialect.name != "sqlite":
        return
    for index in INDEXES:
        if context.is_offline_mode():
            op.execute(_configure(index, BOUND))
            continue
        try:
            op.get_bind().exec_driver_sql(_configure(index, BOUND))
        except sa.exc.OperationalError as exc:  # an SQLite without the setting
            log.warning("%s: FTS5 setting %r not applied (%s)", index, SETTING, exc.orig)


def downgrade() -> None:
    if op.get_context().dialect.name != "sqlite":
        return
    for index in INDEXES:
        if not context.is_offline_mode():
            stored = op.get_bind().execute(
                sa.text(f"SELECT count(*) FROM {index}_config WHERE k = :k"), {"k": SETTING}
            )
            if not stored.scalar_one():
                continue
        op.execute(_configure(index, FTS5_DEFAULT))
        op.execute(f"DELETE FROM {index}_config WHERE k = '{SETTING}'")
