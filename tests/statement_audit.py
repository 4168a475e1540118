"""The statement audit (issue 30; docs/scaling.md#keys-and-statements): for the whole run, on
both backends, every statement the store runs on a session-owned table other than ``sessions``
(``db.routing.CHILD_TABLES``) carries ``session_key`` in its ``WHERE`` (an ``INSERT`` in its
columns), or runs inside a documented cross-session operation (``db.routing.cross_session``).

One ``before_cursor_execute`` listener on the ``Engine`` class sees every engine the suite
creates; the store's direct append path (``db/direct_statement.py``) hands its statements to
the same check. The store's own statements are those run inside its units of work
(``db.routing.in_store``); a test's raw SQL on the store's engine is not audited. The check
is a string test of the compiled SQL, its verdict cached per statement text.

Any statement recorded that is not in the baseline of statements still to be keyed
(``statement_audit_baseline.txt``) fails the session (exit status 1, the statements listed); the
terminal summary gives how many statements were checked and how many ran as each
cross-session operation. Under xdist each worker audits its own statements and the
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
_TABLES = re.compile(r"(?<![\w])\"?(" + "|".join(routing.CHILD_TABLES) + r")\b")
_KEY_AFTER_WHERE = re.compile(r"\b(WHERE|ON)\b.*\bsession_key\b", re.IGNORECASE | re.DOTALL)
_KEY = re.compile(r"\bsession_key\b")
_PARAMS = re.compile(r"\$\d+|%\(\w+\)s|(?<![:\w]):\w+")
_IN_LIST = re.compile(r"IN \((?:\?(?:::\w+)?(?:, )?)+\)")

# Statements not yet keyed (normalized, one a line): the work issue 30 leaves, which only
# shrinks. A statement outside it fails the run; regenerate it with
# OPENSQUILLA_STATEMENT_AUDIT_WRITE=<file> (every unkeyed statement seen is written there).
BASELINE = Path(__file__).with_name("statement_audit_baseline.txt")
WRITE_ENV = "OPENSQUILLA_STATEMENT_AUDIT_WRITE"


def normalized(sql: str) -> str:
    """``sql`` with its whitespace collapsed, parameters as ``?`` and IN lists as ``IN (?)``,
    so one statement shape has one text on both backends' drivers."""
    text = _PARAMS.sub("?", " ".join(sql.split()))
    return _IN_LIST.sub("IN (?)", text)


def _baseline() -> frozenset[str]:
    if not BASELINE.exists():
        return frozenset()
    lines = BASELINE.read_text(encoding="utf-8").splitlines()
    return frozenset(line for line in lines if line and not line.startswith("#"))


def unkeyed_tables(sql: str) -> tuple[str, ...]:
    """The child tables ``sql`` touches without a ``session_key`` predicate (none for a
    statement that is not DML, or one that carries the key)."""
    text = sql.lstrip()
    if not text[:7].upper().startswith(_VERBS):
        return ()
    tables = tuple(sorted(set(_TABLES.findall(text))))
    if not tables:
        return ()
    if text[:6].upper() in ("INSERT", "REPLACE") and _KEY.search(text.split(")", 1)[0]):
        # The key among the inserted columns; an INSERT ... SELECT from a child table must
        # also select by it.
        select = text.upper().find("SELECT")
        if select < 0 or not _TABLES.search(text[select:]) or _KEY_AFTER_WHERE.search(text):
            return ()
        return tables
    if _KEY_AFTER_WHERE.search(text):
        return ()
    return tables


@dataclass
class Audit:
    checked: int = 0
    by_operation: Counter[str] = field(default_factory=Counter)
    known: int = 0  # statements of the baseline
    offenders: dict[str, str] = field(default_factory=dict)  # sql -> the first test seeing it
    seen_unkeyed: set[str] = field(default_factory=set)
    current_test: str = "(outside a test)"
    baseline: frozenset[str] = frozenset()
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
        if verdict in self.baseline:
            self.known += 1
        elif verdict not in self.offenders:
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
    AUDIT.baseline = _baseline()
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
        "known": audit.known,
        "by_operation": dict(audit.by_operation),
        "offenders": audit.offenders,
        "seen": sorted(audit.seen_unkeyed),
    }


def _add(figures: dict[str, Any]) -> None:
    _TOTALS.checked += figures["checked"]
    _TOTALS.known += figures["known"]
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
        f"operation: {operations or 'none'}; {_TOTALS.known:,} of the baseline's not yet keyed "
        f"({BASELINE.name}); {len(_TOTALS.offenders)} new without session_key"
    )
    for sql, test in sorted(_TOTALS.offenders.items(), key=lambda item: item[1]):
        terminalreporter.write_line(f"  unkeyed ({test}): {' '.join(sql.split())[:300]}")
