"""Units of more than one statement, or of many rows, on the pool's DBAPI connection, for
when nobody watches statements (``db/direct_statement.py`` runs one statement and says why
and how): every row of a statement, a statement and its probe, a read and the conditional
write decided from it, and SQLite's one-hop write transaction.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from sqlalchemy.engine import Engine

from .direct_statement import Plan, executed, isolation, pool_connection

T = TypeVar("T")


def rows_and_keys(
    engine: Engine, plan: Plan, params: Mapping[str, Any], *, isolation_level: str | None
) -> tuple[list[tuple[Any, ...]], tuple[str, ...]]:
    """As :func:`first_row`, every row (a list of tuples) and their column names (for
    ``rows.models_of_rows``)."""
    with (
        pool_connection(engine) as fairy,
        isolation(engine.dialect, fairy, isolation_level),
        executed(engine, fairy, plan, params) as cursor,
    ):
        rows = [tuple(row) for row in cursor.fetchall()]
        return rows, tuple(column[0] for column in cursor.description)


def all_rows(
    engine: Engine, plan: Plan, params: Mapping[str, Any], *, isolation_level: str | None
) -> list[tuple[Any, ...]]:
    """:func:`rows_and_keys`' rows alone."""
    return rows_and_keys(engine, plan, params, isolation_level=isolation_level)[0]


def returned_or_probed(
    engine: Engine,
    plan: Plan,
    probe: Plan,
    params: Mapping[str, Any],
    *,
    isolation_level: str | None,
) -> tuple[list[tuple[Any, ...]], tuple[str, ...], bool]:
    """In SQLAlchemy's greenlet, as :func:`first_row`: ``plan`` (a statement returning
    rows) and, when it returned none, ``probe`` (a one-value SELECT, with the same
    ``params``) on the same pool connection. Its rows as the driver returned them, their
    column names, and ``True`` when it returned rows, else the probe's value as a bool."""
    with pool_connection(engine) as fairy, isolation(engine.dialect, fairy, isolation_level):
        with executed(engine, fairy, plan, params) as cursor:
            rows = [tuple(row) for row in cursor.fetchall()]
            keys = tuple(column[0] for column in cursor.description)
        if rows:
            return rows, keys, True
        with executed(engine, fairy, probe, params) as cursor:
            found = cursor.fetchone()
    return rows, keys, bool(found is not None and found[0])


def read_then_write(
    engine: Engine,
    read: Plan,
    params: Mapping[str, Any],
    decide: Callable[[tuple[Any, ...] | None], tuple[Plan, Mapping[str, Any], T]],
    *,
    isolation_level: str | None,
    tries: int,
) -> T | None:
    """In SQLAlchemy's greenlet, as :func:`first_row`, on one pool connection in
    autocommit: ``read`` (its first row as the driver returned it, or ``None``), then the
    write ``decide`` makes of it (a conditional statement, its parameters, and what to
    return when it changed a row); a write that changed no row reads again, ``tries`` times
    in all: ``None`` then. What ``decide`` raises propagates, nothing written."""
    with pool_connection(engine) as fairy, isolation(engine.dialect, fairy, isolation_level):
        for _ in range(tries):
            with executed(engine, fairy, read, params) as cursor:
                row = cursor.fetchone()
            write, values, outcome = decide(tuple(row) if row is not None else None)
            with executed(engine, fairy, write, values) as cursor:
                if cursor.rowcount:
                    return outcome
    return None


def rows_in_one_hop(
    engine: Engine, plan: Plan, params: Mapping[str, Any], *, begin: str, commit: list[Any]
) -> list[tuple[Any, ...]]:
    """In SQLAlchemy's greenlet, SQLite's lean adapter (``sqlite_driver``): on a pool
    connection, ``begin`` (a BEGIN), ``plan`` with ``params`` and the COMMIT, in one call
    on the driver's thread; every row returned, as tuples. ``commit`` is the COMMIT's token
    (``[True, rows]``: committed only if the statement returned ``rows`` rows and the token
    still says ``True`` when the thread reaches it); a transaction left open (fewer rows, or
    the token called off) is rolled back before the connection goes back."""
    with pool_connection(engine) as fairy:
        adapter: Any = fairy.dbapi_connection
        adapter.defer_begin(begin)
        adapter.commit_with_next(commit[1], token=commit)
        try:
            with executed(engine, fairy, plan, params) as cursor:
                rows = [tuple(row) for row in cursor.fetchall()]
        finally:
            adapter.rollback()  # nothing to do (no hop) when the statement committed
    return rows
