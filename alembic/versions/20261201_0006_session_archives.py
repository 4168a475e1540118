"""session archives: reset archives kept in the database itself

``session_archives`` holds one row per reset archive written by a store opened with
``SessionStorage(..., archive_store="database")``: the old generation's archive document (the
same JSON a reset archive file holds, as text, so it reads back byte for byte), who it
belongs to (``session_key``, the archived ``session_id``, the ``epoch`` after the reset),
why (``reason``), when (``created_at``, milliseconds) and its size in UTF-8 bytes. A reset
inserts its row inside its own transaction, so the archive and the reset commit together or
not at all: a deployment of many workers sharing one PostgreSQL server keeps its archives in
one place (docs/semantics.md#reset-archive).

The table is the archive, not session data: it is not one of the five tables, is not
exported, and deleting, pruning or capping sessions leaves its rows alone.

The revision is expand-only: a release without it never reads the table (and writes its
archives to files).

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import context, op
from opensquilla.session.db import layout

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

expand_only = True

TABLE = "session_archives"
ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    # Idempotent, as every revision: a database whose version row was lost replays it.
    if not context.is_offline_mode() and sa.inspect(op.get_bind()).has_table(TABLE):
        return
    bind = None if context.is_offline_mode() else op.get_bind()
    layout.create_table(
        bind,
        TABLE,
        sa.Column("id", ID, primary_key=True, autoincrement=True),
        sa.Column("session_key", sa.Text(), nullable=False),
        sa.Column("session_id", sa.Text(), nullable=False),
        sa.Column("epoch", sa.BigInteger(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("size_bytes", sa.BigInteger(), nullable=False),
        sa.Column("document", sa.Text(), nullable=False),
        sqlite_autoincrement=True,
    )
    layout.create_index(bind, "idx_session_archives_session_key", TABLE, ["session_key", "id"])


def downgrade() -> None:
    if not context.is_offline_mode() and not sa.inspect(op.get_bind()).has_table(TABLE):
        return
    op.drop_index("idx_session_archives_session_key", table_name=TABLE)
    op.drop_table(TABLE)
