"""The statement audit can fail (tests/statement_audit.py): an unkeyed child-table statement
run as the store's own is recorded by the suite-wide listener, on both backends; a keyed one,
or one inside a documented cross-session operation, is not."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from opensquilla.session import SessionStorage
from opensquilla.session.db import routing, statement_watch
from tests import statement_audit
from tests.statement_audit import AUDIT, normalized, unkeyed_tables


@pytest.mark.parametrize(
    ("sql", "flagged"),
    [
        ("SELECT * FROM transcript_entries WHERE session_key = ? AND id = ?", ()),
        ("SELECT * FROM transcript_entries WHERE session_id = ?", ("transcript_entries",)),
        (
            "DELETE FROM compacted_transcript_entries WHERE session_id IN (?, ?)",
            ("compacted_transcript_entries",),
        ),
        ("UPDATE session_summaries SET x = 1 WHERE session_key = $1", ()),
        ("INSERT INTO session_archives (session_key, session_id) VALUES (?, ?)", ()),
        (
            "INSERT INTO transcript_entries (session_id, session_key) SELECT session_id, "
            "session_key FROM transcript_entries WHERE session_id = ?",
            ("transcript_entries",),
        ),
        (
            "INSERT INTO transcript_entries (session_id, message_id) VALUES (?, ?)",
            ("transcript_entries",),
        ),
        ("SELECT * FROM sessions WHERE session_id = ?", ()),
        ("SELECT * FROM scope_states WHERE scope = ?", ()),
        ("CREATE INDEX x ON transcript_entries (session_id)", ()),
        ("SELECT count(*) FROM canonical_archive_counts", ("canonical_archive_counts",)),
        # The key only in an outer select list: the inner read is unkeyed.
        (
            "SELECT e.session_key, e.content FROM (SELECT * FROM transcript_entries "
            "WHERE session_id = ?) AS e",
            ("transcript_entries",),
        ),
        # Each arm of a union, each EXISTS, keyed on its own.
        (
            "SELECT id FROM transcript_entries WHERE transcript_entries.session_key = ? UNION ALL "
            "SELECT id FROM compacted_transcript_entries WHERE session_id = ?",
            ("compacted_transcript_entries", "transcript_entries"),
        ),
        (
            "SELECT id FROM transcript_entries WHERE transcript_entries.session_key = ? UNION ALL "
            "SELECT id FROM compacted_transcript_entries "
            "WHERE compacted_transcript_entries.session_key = ?",
            (),
        ),
        # The session row's key does not key a child table's read.
        (
            "SELECT * FROM sessions JOIN transcript_entries ON transcript_entries.session_id = "
            "sessions.session_id WHERE sessions.session_key = ?",
            ("transcript_entries",),
        ),
        (
            "SELECT * FROM sessions JOIN transcript_entries ON transcript_entries.session_key = "
            "sessions.session_key WHERE sessions.session_key = ?",
            (),
        ),
        # An assignment is not a predicate.
        (
            "UPDATE transcript_entries SET session_key = ?, content = ? WHERE id = ?",
            ("transcript_entries",),
        ),
        ("UPDATE transcript_entries SET content = ? WHERE session_key = ? AND id = ?", ()),
        # A row comparison led by the key.
        (
            "DELETE FROM session_summaries WHERE (session_key, session_id) IN (VALUES (?, ?))",
            (),
        ),
        # An INSERT's RETURNING subquery reads the table too.
        (
            "INSERT INTO transcript_appends (session_key, session_id) VALUES (?, ?) "
            "RETURNING (SELECT max(id) FROM transcript_entries)",
            ("transcript_appends", "transcript_entries"),
        ),
    ],
)
def test_the_string_check(sql: str, flagged: tuple[str, ...]) -> None:
    assert unkeyed_tables(sql) == flagged


async def test_the_listener_records_an_unkeyed_statement_of_the_store(
    storage: SessionStorage,
) -> None:
    unkeyed = "SELECT count(*) FROM session_context_states WHERE session_id = 'audit-proof'"
    keyed = "SELECT count(*) FROM session_context_states WHERE session_key = 'audit-proof'"
    by_operation = AUDIT.by_operation["stats"]
    try:
        async with storage.engine.connect() as conn:
            await conn.execute(sa.text(unkeyed))  # a test's own SQL: not audited
            assert normalized(unkeyed) not in AUDIT.offenders
            with routing.store_statements():
                await conn.execute(sa.text(keyed))
                assert normalized(keyed) not in AUDIT.offenders
                with routing.cross_session("stats"):
                    await conn.execute(sa.text(unkeyed))
                assert normalized(unkeyed) not in AUDIT.offenders
                assert AUDIT.by_operation["stats"] == by_operation + 1
                await conn.execute(sa.text(unkeyed))
        assert "test_the_listener_records" in AUDIT.offenders[normalized(unkeyed)]
    finally:
        # Proven; taken back, so that this run's verdict is about the store's statements.
        AUDIT.offenders.pop(normalized(unkeyed), None)
        AUDIT.seen_unkeyed.discard(normalized(unkeyed))


def test_an_undocumented_operation_is_refused() -> None:
    with (
        pytest.raises(ValueError, match="not a documented cross-session operation"),
        routing.cross_session("everything"),
    ):
        pass


async def test_the_audit_leaves_the_direct_append_path_on_and_sees_it(
    storage: SessionStorage,
) -> None:
    """The suite's listener does not send appends off the direct path (the path the
    release takes), which hands its statements to the same check."""
    assert statement_audit._direct in statement_watch.DIRECT_AUDITORS
    assert not statement_watch.statements_watched(storage.engine.sync_engine)
