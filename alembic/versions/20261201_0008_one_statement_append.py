"""SQLite: the fenced append as one statement (the ``transcript_appends`` view)

An append is three things that commit together or not at all: the fence (the session row
still holds the entry's key, the expected epoch and the entry's session id), the touch of
that row (``updated_at``; with a token delta ``total_tokens + delta``, guarded by the 64-bit
ceiling, and ``total_tokens_fresh`` false) and the insert of the entry. PostgreSQL does it
in one statement already (the fenced UPDATE as a CTE feeding the INSERT). SQLite has no
DML in a CTE, so this revision gives it the same shape through a view:

* ``transcript_appends``, a view with the columns of ``transcript_entries`` (without
  ``id``) plus ``fence_epoch``, ``touched_at``, ``token_delta`` and ``tokens_ceiling``;
  it never holds a row.
* ``transcript_appends_insert``, its ``INSTEAD OF INSERT`` trigger: the fenced UPDATE of
  ``sessions``, then ``RAISE(IGNORE)`` when it changed no row (the rest of the statement,
  the ``RETURNING`` row included, is abandoned: nothing is written), then the INSERT into
  ``transcript_entries`` (whose own triggers, the FTS index's, fire as always).

``INSERT INTO transcript_appends ... RETURNING (SELECT max(id) FROM transcript_entries)``
is then the whole append: one statement, run in autocommit, one thread hop
(db/repos/fenced_append.py). A returned row means inserted; its value is the new id, since
the statement holds the write lock and ``id`` is ``AUTOINCREMENT`` (never reused, always
above every id in the table).

Only objects are added: the older store's tables and triggers are unchanged, and the
trigger body uses nothing an older SQLite cannot parse (a file migrated here still opens
everywhere). Code on an SQLite without ``RETURNING`` (before 3.35) ignores the view and
appends in three statements. If ``transcript_entries`` ever gains a column, the view and
trigger must be recreated with it (tests/migrations/test_revision_0008.py checks that they
list exactly the table's columns).

PostgreSQL: nothing.

The revision is expand-only: a release without it never uses the view. Downgrade drops the
view and its trigger.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01
"""

# ruff: noqa: S608 (the names are this file's constants)

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0008"
down_revision: str | Sequence[str] | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

expand_only = True

VIEW = "transcript_appends"
TRIGGER = "transcript_appends_insert"
# transcript_entries' columns without id, in table order (the older store's DDL).
ENTRY_COLUMNS = (
    "session_id",
    "session_key",
    "message_id",
    "role",
    "content",
    "tool_calls",
    "tool_call_id",
    "reasoning_content",
    "turn_usage",
    "turn_context",
    "created_at",
    "token_count",
    "provenance_kind",
    "provenance_origin_session_id",
    "provenance_source_session_key",
    "provenance_source_channel",
    "provenance_source_tool",
    "schema_version",
)
FENCE_COLUMNS = ("fence_epoch", "touched_at", "token_delta", "tokens_ceiling")

_COLUMNS = ", ".join(ENTRY_COLUMNS)
_FENCE = ", ".join(f"CAST(NULL AS INTEGER) AS {name}" for name in FENCE_COLUMNS)
CREATE_VIEW = f"""CREATE VIEW IF NOT EXISTS {VIEW} AS
SELECT {_COLUMNS}, {_FENCE}
FROM transcript_entries WHERE 0"""

# The fence of db/repos/fenced_append.py, written once per arm: without a delta only
# updated_at is set (as the three-statement path's UPDATE does); with one, the ceiling
# guards the sum. changes() is the row count of the trigger's latest UPDATE. A missing
# delta counts as 0, so every inserted row goes through exactly one arm.
_DELTA = "ifnull(NEW.token_delta, 0)"
_FENCED = (
    "session_key = NEW.session_key AND epoch = NEW.fence_epoch AND session_id = NEW.session_id"
)
CREATE_TRIGGER = f"""CREATE TRIGGER IF NOT EXISTS {TRIGGER} INSTEAD OF INSERT ON {VIEW}
BEGIN
    UPDATE sessions SET updated_at = NEW.touched_at
    WHERE {_DELTA} = 0 AND {_FENCED};
    SELECT RAISE(IGNORE) WHERE {_DELTA} = 0 AND changes() = 0;
    UPDATE sessions SET updated_at = NEW.touched_at,
        total_tokens = total_tokens + NEW.token_delta, total_tokens_fresh = 0
    WHERE {_DELTA} <> 0 AND {_FENCED} AND total_tokens <= NEW.tokens_ceiling;
    SELECT RAISE(IGNORE) WHERE {_DELTA} <> 0 AND changes() = 0;
    INSERT INTO transcript_entries ({_COLUMNS})
    VALUES ({", ".join("NEW." + name for name in ENTRY_COLUMNS)});
END"""


def upgrade() -> None:
    # Idempotent (IF NOT EXISTS), as every revision: a lost version row replays it.
    if op.get_context().dialect.name != "sqlite":
        return
    op.execute(CREATE_VIEW)
    op.execute(CREATE_TRIGGER)


def downgrade() -> None:
    if op.get_context().dialect.name != "sqlite":
        return
    op.execute(f"DROP TRIGGER IF EXISTS {TRIGGER}")
    op.execute(f"DROP VIEW IF EXISTS {VIEW}")
