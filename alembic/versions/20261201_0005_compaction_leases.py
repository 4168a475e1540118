"""compaction leases: one summariser run per session across processes

``compaction_leases`` holds, per session key, the compaction running on it (or the last one
that ran): which inputs it compacts (``flight_key``, a SHA-256 that holds no secret), which
worker holds it (``holder``, a random token per run), until when (``expires_at``, renewed by
the holder while it runs, so a crashed worker's lease lapses) and, once finished, its
outcome (``state`` ``done``, ``result``: the compaction result without its kept entries).
Workers that want to compact the same session wait for the holder instead of paying for a
second summariser call, and those with equal inputs receive its result
(docs/semantics.md#single-flight).

The table is coordination state, not session data: it is not one of the five tables, is not
exported, and a row left by a deleted session is harmless (the next lease on that key
replaces it). All times are the database's clock in milliseconds.

The revision is expand-only: a release without it never reads the table.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import context, op
from opensquilla.session.db import layout

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

expand_only = True

TABLE = "compaction_leases"


def upgrade() -> None:
    # Idempotent, as every revision: a database whose version row was lost replays it.
    if not context.is_offline_mode() and sa.inspect(op.get_bind()).has_table(TABLE):
        return
    layout.create_table(
        None if context.is_offline_mode() else op.get_bind(),
        TABLE,
        sa.Column("session_key", sa.Text(), primary_key=True),
        sa.Column("session_id", sa.Text(), nullable=False),
        sa.Column("flight_key", sa.Text(), nullable=False),
        sa.Column("holder", sa.Text(), nullable=False),
        sa.Column("state", sa.Text(), nullable=False),
        sa.Column("acquired_at", sa.BigInteger(), nullable=False),
        sa.Column("expires_at", sa.BigInteger(), nullable=False),
        sa.Column("finished_at", sa.BigInteger(), nullable=True),
        sa.Column("result", sa.Text(), nullable=True),
    )


def downgrade() -> None:
    if not context.is_offline_mode() and not sa.inspect(op.get_bind()).has_table(TABLE):
        return
    op.drop_table(TABLE)
