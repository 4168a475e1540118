"""The statement audit (issue 30; docs/scaling.md#keys-and-statements): for the whole run, on
both backends, every statement the store runs on a session-owned table other than ``sessions``
(``db.routing.CHILD_TABLES``) carries ``session_key`` in its ``WHERE`` (an ``INSERT`` in its
columns), or runs inside a documented cross-session operation (``db.routing.cross_session``).

One ``before_cursor_execute`` listener on the ``Engine`` class sees every engine the suite
creates; the store's direct append path (``db/direct_statement.py``) hands its statements to
the same check. The store's own statements are those run inside its units of work
(``db.routing.in_store``); a test's raw SQL on the store's engine is not audited. The check
is a string test of the compiled SQL, its verdict cached per statement text.

Each read of a child table needs a key predicate of its own (a UNION's arms, each EXISTS, a
subquery under an outer select), on a table that is a session's child: the session row's key
does not key a join to a child table, an assignment (``SET session_key = ?``) is not a
predicate.

Any unkeyed statement fails the session (exit status 1, the statements listed); the terminal
summary gives how many statements were checked and how many ran as each cross-session
operation. Under xdist each worker audits its own statements and the
controller adds them up.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from opensquilla.session.db import routing, statement_watch

_VERBS = ("SELECT", "INSERT", "UPDATE", "DELETE", "WITH", "REPLACE")
_CHILD = "|".join(routing.CHILD_TABLES)
_TABLES = re.compile(r"(?<![\w])\"?(" + _CHILD + r")\b")
_KEY = re.compile(r"\bsession_key\b")
# A read of a child table: each one needs a key predicate of its own (a UNION's arms, an
# EXISTS beside another, a subquery under an outer select).
_READS = re.compile(
    r"\b(?:FROM|JOIN|UPDATE)\s+(?:\"?\w+\"?\.)?\"?(?:" + _CHILD + r")\b", re.IGNORECASE
)
# An INSERT into a child table and its column list (the WITH of a CTE insert included).
_INSERTS = re.compile(
    r"\b(?:INSERT(?:\s+OR\s+\w+)?|REPLACE)\s+INTO\s+(?:\"?\w+\"?\.)?\"?(?:"
    + _CHILD
    + r")\b\"?\s*\(([^)]*)\)",
    re.IGNORECASE,
)
# A predicate on session_key (``x.session_key = ?``, ``... = x.session_key``, ``session_key IN``,
# a row comparison led by it), unless the column is one of a table that is not a child's.
_QUALIFIER = r"(?:(?P<q>\"?\w+\"?)\.)?"
_PREDICATES = (
    re.compile(_QUALIFIER + r"session_key\s*(?:=|IN\b)", re.IGNORECASE),
    re.compile(r"=\s*" + _QUALIFIER + r"session_key\b", re.IGNORECASE),
    re.compile(r"\(\s*" + _QUALIFIER + r"session_key\s*,[^()]*\)\s*(?:=|IN\b)", re.IGNORECASE),
)
_NOT_CHILD = frozenset({"sessions", "scope_states", "fence", "excluded"})
# Assignments are not predicates: an UPDATE's SET list, an upsert's DO UPDATE SET.
_SET_LISTS = re.compile(
    r"\bSET\b.*?(?=\bWHERE\b|\bRETURNING\b|\bFROM\b|$)", re.IGNORECASE | re.DOTALL
)
_PARAMS = re.compile(r"\$\d+|%\(\w+\)s|(?<![:\w]):\w+")
_IN_LIST = re.compile(r"IN \((?:\?(?:::\w+)?(?:, )?)+\)")

# OPENSQUILLA_STATEMENT_AUDIT_WRITE=<file>: every unkeyed statement seen, normalized, is
# written there (one a line), to find them all in one run.
WRITE_ENV = "OPENSQUILLA_STATEMENT_AUDIT_WRITE"


def normalized(sql: str) -> str:
    """``sql`` with its whitespace collapsed, parameters as ``?`` and IN lists as ``IN (?)``,
    so one statement shape has one text on both backends' drivers."""
    text = _PARAMS.sub("?", " ".join(sql.split()))
    return _IN_LIST.sub("IN (?)", text)


def unkeyed_tables(sql: str) -> tuple[str, ...]:
    """The child tables ``sql`` touches without a ``session_key`` predicate (none for a
    statement that is not DML, or one that carries the key)."""
    text = sql.lstrip()
    if not text[:7].upper().startswith(_VERBS):
        return ()
    tables = tuple(sorted(set(_TABLES.findall(text))))
    if not tables:
        return ()
    inserts = _INSERTS.findall(text)
    if any(not _KEY.search(columns) for columns in inserts):
        return tables  # the key not among an INSERT's columns
    reads = len(_READS.findall(text))
    if not reads:
        return () if inserts else tables  # an INSERT ... VALUES (or from a CTE), keyed
    # Every read of a child table (an INSERT ... SELECT's, a RETURNING subquery's) keyed.
    return () if _key_predicates(text) >= reads else tables


def _key_predicates(text: str) -> int:
    """How many ``session_key`` predicates ``text`` holds on tables other than ``sessions``
    (and the other tables that are not a session's children)."""
    text = _SET_LISTS.sub(" ", text)
    found = 0
    for pattern in _PREDICATES:
        for match in pattern.finditer(text):
            qualifier = (match.group("q") or "").strip('"').lower()
            if qualifier not in _NOT_CHILD:
                found += 1
    return found


@dataclass
class Audit:
    checked: int = 0
    by_operation: Counter[str] = field(default_factory=Counter)
    offenders: dict[str, str] = field(default_factory=dict)  # sql -> the first test seeing it
    seen_unkeyed: set[str] = field(default_factory=set)
    current_test: str = "(outside a test)"
    # sql -> None (keyed, or no child table) or its normalized text
    _verdicts: dict[str, str | None] = field(default_factory=dict)

    def check(self, sql: str, *, in_store: bool) -> None:
        if not in_store:
            return
        self.checked += 1
        try:
            verdict = self._verdicts[sql]
        except KeyError:
            verdict = self._verdicts[sql] = normalized(sql) if unkeyed_tables(sql) else None
        if verdict is None:
            return
        operation = routing.current_operation()
        if operation is not None:
            self.by_operation[operation] += 1
            return
        self.seen_unkeyed.add(verdict)
        if verdict not in self.offenders:
            self.offenders[verdict] = self.current_test


AUDIT = Audit()
_TOTALS = Audit()


def _listener(
    _conn: Any, _cursor: Any, statement: str, parameters: Any, *_args: Any
) -> tuple[str, Any]:
    """The suite's ``before_cursor_execute`` listener (``retval=True``: SQLAlchemy keeps the
    function itself, no wrapper, which is how the statement watch knows it for an auditor's
    and leaves the direct append path on)."""
    AUDIT.check(statement, in_store=routing.in_store())
    return statement, parameters


def _direct(statement: str) -> None:
    AUDIT.check(statement, in_store=True)  # the direct path is a unit of work's


def attach() -> None:
    sa.event.listen(Engine, "before_cursor_execute", _listener, retval=True)
    statement_watch.add_auditor(_listener, _direct)


def detach() -> None:
    sa.event.remove(Engine, "before_cursor_execute", _listener)
    statement_watch.remove_auditor(_listener, _direct)


def pytest_configure(config: pytest.Config) -> None:
    attach()


def pytest_unconfigure(config: pytest.Config) -> None:
    detach()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    AUDIT.current_test = item.nodeid


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker: hand the figures to the controller
        workeroutput["statement_audit"] = _figures(AUDIT)
        return
    _add(_figures(AUDIT))
    written = os.environ.get(WRITE_ENV)
    if written:
        Path(written).write_text("".join(f"{sql}\n" for sql in sorted(_TOTALS.seen_unkeyed)))
    if _TOTALS.offenders and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def _figures(audit: Audit) -> dict[str, Any]:
    return {
        "checked": audit.checked,
        "by_operation": dict(audit.by_operation),
        "offenders": audit.offenders,
        "seen": sorted(audit.seen_unkeyed),
    }


def _add(figures: dict[str, Any]) -> None:
    _TOTALS.checked += figures["checked"]
    _TOTALS.by_operation.update(figures["by_operation"])
    _TOTALS.seen_unkeyed.update(figures["seen"])
    for sql, test in figures["offenders"].items():
        _TOTALS.offenders.setdefault(sql, test)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    figures = getattr(node, "workeroutput", {}).get("statement_audit")
    if figures:
        _add(figures)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if getattr(terminalreporter.config, "workeroutput", None) is not None:
        return
    operations = ", ".join(f"{name} {n:,}" for name, n in sorted(_TOTALS.by_operation.items()))
    terminalreporter.write_line(
        f"statement audit: {_TOTALS.checked:,} store statements checked; cross-session by "
        f"operation: {operations or 'none'}; {len(_TOTALS.offenders)} without session_key"
    )
    for sql, test in sorted(_TOTALS.offenders.items(), key=lambda item: item[1]):
        terminalreporter.write_line(f"  unkeyed ({test}): {' '.join(sql.split())[:300]}")
