"""unique session ids; 64-bit revision counters

* ``sessions.session_id`` becomes unique (``uq_sessions_session_id``). A session id names
  one generation of one session, and delete, prune, cap and reset act on every row that
  carries it: two sessions sharing one destroy each other's transcripts. Before the index
  is built the revision looks for session ids that are already shared (an adopted legacy
  file, an import); if there are any it refuses with a ``MigrationError`` naming each id
  and the keys sharing it, and changes nothing (the whole upgrade is one transaction). It
  never merges or rewrites rows: which session keeps the id is the operator's decision.
* ``sessions.model_routing_revision`` and ``sessions.collaboration_revision`` become
  ``BIGINT``: revision counters may be clocks. On SQLite this is no statement at all (its
  ``INTEGER`` holds 64-bit values, and ``alembic check`` compares by affinity), so the table
  is never rebuilt and the older store's triggers and ``sqlite_sequence`` stay. On
  PostgreSQL it is ``ALTER COLUMN ... TYPE BIGINT``, which rewrites ``sessions`` (one row
  per conversation) under an exclusive lock for that moment.

On PostgreSQL the index is an ordinary ``CREATE UNIQUE INDEX`` inside the migration
transaction (not ``CONCURRENTLY``, which cannot run in one): a failure leaves nothing
behind. ``sessions`` is locked first, so no writer can add a duplicate between the check
and the index.

Downgrade removes exactly that: the index, and on PostgreSQL the two columns go back to
``INTEGER``, refused with a ``MigrationError`` naming the sessions whose value no longer
fits 32 bits (narrowing would otherwise fail obscurely, or lose them).

The revision is idempotent (a database at head whose version row was lost replays it
unchanged). Offline (``--sql``) nothing can be inspected: the script builds the index and widens the
columns; on a database that holds shared ids the ``CREATE UNIQUE INDEX`` itself fails and
the script's transaction stops there.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import context, op
from opensquilla.session.db import layout
from opensquilla.session.errors import MigrationError

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INDEX = "uq_sessions_session_id"  # the "uq" naming convention of db/base.py
WIDENED = ("model_routing_revision", "collaboration_revision")
_INT32 = (-(2**31), 2**31 - 1)
_SHOWN_GROUPS = 20
_SHARED_ID_ADVICE = (
    "Two sessions with one id delete each other's transcripts, so the store refuses to run "
    "on them. For each id decide which session owns it and its rows, give every other "
    "session a new id (UPDATE sessions SET session_id = '<new uuid>' WHERE session_key = "
    "'<key>') or delete it, then upgrade again"
)


def upgrade() -> None:
    dialect = op.get_context().dialect.name
    if context.is_offline_mode():
        if dialect == "postgresql":
            for column in WIDENED:
                _alter(column, sa.BigInteger(), sa.Integer())
        op.create_index(INDEX, "sessions", ["session_id"], unique=True)
        return
    bind = op.get_bind()
    narrow = _narrow_columns(bind) if dialect == "postgresql" else []
    if dialect == "postgresql":
        # One lock, taken once: SHARE keeps writers out while the check and the index run
        # (readers go on); the type change needs ACCESS EXCLUSIVE anyway, and taking it up
        # front avoids upgrading a lock we hold (which could deadlock with a reader that
        # is about to write).
        mode = "ACCESS EXCLUSIVE" if narrow else "SHARE"
        op.execute(f"LOCK TABLE sessions IN {mode} MODE")
    _refuse_shared_session_ids(bind)
    for column in narrow:
        _alter(column, sa.BigInteger(), sa.Integer())
    # A database whose version row was lost (a restored backup, an adoption cut short)
    # replays the history: what is already there is kept.
    present = {index["name"] for index in sa.inspect(bind).get_indexes("sessions")}
    if not present & {INDEX, layout.PARTITIONED_SESSION_ID_INDEX}:
        # A partitioned database (db/layout.py) gets a non-unique index: it cannot have this.
        layout.create_index(bind, INDEX, "sessions", ["session_id"], unique=True)


def downgrade() -> None:
    dialect = op.get_context().dialect.name
    op.drop_index(INDEX, table_name="sessions")
    if dialect != "postgresql":
        return
    if not context.is_offline_mode():
        _refuse_values_beyond_int32(op.get_bind())
    for column in WIDENED:
        _alter(column, sa.Integer(), sa.BigInteger())


def _alter(column: str, to: sa.types.TypeEngine[int], was: sa.types.TypeEngine[int]) -> None:
    op.alter_column(
        "sessions",
        column,
        type_=to,
        existing_type=was,
        existing_nullable=False,
        existing_server_default=sa.text("0"),
    )


def _narrow_columns(bind: sa.engine.Connection) -> list[str]:
    """The revision columns still 32-bit (a legacy port may already have them 64-bit)."""
    types = {c["name"]: c["type"] for c in sa.inspect(bind).get_columns("sessions")}
    return [
        column
        for column in WIDENED
        if column in types and not isinstance(types[column], sa.BigInteger)
    ]


def _quoted(text: str) -> str:
    shown = "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in text)
    return repr(shown if len(shown) <= 120 else shown[:120] + "...")


def _refuse_shared_session_ids(bind: sa.engine.Connection) -> None:
    sessions = sa.table("sessions", sa.column("session_key"), sa.column("session_id"))
    shared = (
        sa.select(sessions.c.session_id, sa.func.count().label("n"))
        .group_by(sessions.c.session_id)
        .having(sa.func.count() > 1)
        .order_by(sessions.c.session_id)
    )
    groups = bind.execute(shared).all()
    if not groups:
        return
    shown = groups[:_SHOWN_GROUPS]
    keys: dict[str, list[str]] = {}
    rows = bind.execute(
        sa.select(sessions.c.session_id, sessions.c.session_key)
        .where(sessions.c.session_id.in_([sid for sid, _ in shown]))
        .order_by(sessions.c.session_id, sessions.c.session_key)
    )
    for sid, key in rows:
        keys.setdefault(sid, []).append(key)
    listed = "; ".join(
        f"session id {_quoted(sid)} is shared by {len(keys[sid])} sessions "
        f"({', '.join(_quoted(key) for key in keys[sid])})"
        for sid, _ in shown
    )
    more = f"; and {len(groups) - len(shown)} more shared id(s)" if len(groups) > len(shown) else ""
    raise MigrationError(
        f"cannot make sessions.session_id unique: {len(groups)} session id(s) belong to more "
        f"than one session: {listed}{more}. Nothing was changed (the whole upgrade was rolled "
        f"back). {_SHARED_ID_ADVICE}"
    )


def _refuse_values_beyond_int32(bind: sa.engine.Connection) -> None:
    sessions = sa.table("sessions", sa.column("session_key"), *map(sa.column, WIDENED))
    low, high = _INT32
    problems = []
    for column in WIDENED:
        value = sessions.c[column]
        rows = bind.execute(
            sa.select(sessions.c.session_key, value)
            .where(sa.or_(value < low, value > high))
            .order_by(sessions.c.session_key)
            .limit(_SHOWN_GROUPS + 1)
        ).all()
        if rows:
            listed = ", ".join(f"{_quoted(key)} ({number})" for key, number in rows[:_SHOWN_GROUPS])
            more = " and more" if len(rows) > _SHOWN_GROUPS else ""
            problems.append(f"{column} of {listed}{more}")
    if problems:
        raise MigrationError(
            "cannot downgrade below revision 0002: these values do not fit the 32-bit "
            f"columns of revision 0001: {'; '.join(problems)}. Nothing was changed; lower "
            "or clear them first if losing them is intended"
        )
