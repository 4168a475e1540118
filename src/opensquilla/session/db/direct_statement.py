"""One write statement on the pool's DBAPI connection, for when nobody watches statements.

The append is one statement in autocommit (``uow.append_in_one_statement``). Through
SQLAlchemy's ``Connection`` it pays for the execution context, the event dispatch, the
result object and the commit bookkeeping: about half of its Python time (bench/RESULTS.md).
None of that changes what the database does; it is what makes every statement visible on
``storage.engine``, whose events are a public seam (OpenTelemetry's SQLAlchemy
instrumentation, the fault-injection tests). So the statement runs here only while nothing
listens for statements (:func:`statements_watched`, decided per call: a listener attached
after ``connect()`` is honoured at the next append); otherwise it takes the ``Connection``
path.

Here, on the DBAPI connection the engine's pool hands out (its checkout and checkin
listeners, its ping, its reset on return all run as usual), the statement compiled once per
engine by SQLAlchemy's own compiler, its values bound by the same type processors, is
executed on a cursor, and everything that goes wrong ends as it would on the ``Connection``
path: a driver error wrapped by ``DBAPIError.instance`` (so ``db/errors.py`` translates it
alike), the pool invalidated on a disconnect and the connection never returned broken, the
connection invalidated when a cancellation, a timeout or any other exit exception
(SQLAlchemy's ``util.is_exit_exception``) interrupts the statement, anything else the
caller raised passed through unchanged.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any, NoReturn

from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Connection, Dialect, Engine
from sqlalchemy.pool import PoolProxiedConnection
from sqlalchemy.sql import ClauseElement, Executable
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.sqltypes import TupleType
from sqlalchemy.util import await_only
from sqlalchemy.util.concurrency import is_exit_exception

from ..errors import DatabaseUnavailableError
from .statement_watch import DIRECT_AUDITORS

# The drivers whose DBAPI adapters this module knows (what their execution contexts do
# around a statement is done here too); any other takes the Connection path.
DRIVERS = frozenset({"aiosqlite", "asyncpg"})


@dataclass(frozen=True, slots=True)
class Plan:
    """A statement compiled for one engine: its SQL and how its values are bound."""

    sql: str
    compiled: SQLCompiler
    order: tuple[str, ...]
    processors: Mapping[str, Callable[[Any], Any]]
    sequence: Callable[[list[Any]], Sequence[Any]]
    # Every bind of the statement is one of the parameters, under its own name: what
    # ``construct_params`` would return is ``params`` itself (no default, no callable,
    # no renamed or extracted bind), so the values are read from it directly.
    by_name: bool = False
    _processed: tuple[tuple[int, Callable[[Any], Any]], ...] | None = field(
        default=None, compare=False, repr=False
    )

    def values(self, params: Mapping[str, Any]) -> Sequence[Any]:
        """The DBAPI parameters, as ``DefaultExecutionContext`` binds them: each bind's
        value in order (one ``itemgetter`` call), then the binds whose types process
        their values (a batch of ten rows has 210 binds, 40 of them processed)."""
        bound = (
            params if self.by_name else self.compiled.construct_params(params, escape_names=False)
        )
        order = self.order
        if len(order) > 1:
            values = list(itemgetter(*order)(bound))
        else:
            values = [bound[key] for key in order]
        for at, processor in self.processed:
            values[at] = processor(values[at])
        return self.sequence(values)

    @property
    def processed(self) -> tuple[tuple[int, Callable[[Any], Any]], ...]:
        """``(position, processor)`` of each bind whose type processes its value."""
        found = self._processed
        if found is None:
            processors = self.processors
            found = tuple(
                (at, processors[key]) for at, key in enumerate(self.order) if key in processors
            )
            object.__setattr__(self, "_processed", found)
        return found


# Per dialect: (id of the statement, its parameter names) -> (the statement, its plan). The
# statement is kept and checked with ``is``: an id is reused once its object is gone.
_PLANS: weakref.WeakKeyDictionary[
    Dialect, dict[tuple[int, tuple[str, ...]], tuple[ClauseElement, Plan | None]]
] = weakref.WeakKeyDictionary()


def plan_for(engine: Engine, statement: ClauseElement, keys: tuple[str, ...]) -> Plan | None:
    """``statement`` compiled for ``engine`` with the parameter names ``keys`` (once per
    dialect), or ``None`` when it cannot run here: another driver, a named paramstyle,
    Python-side defaults or expanding parameters (what the execution context would add)."""
    dialect = engine.dialect
    plans = _PLANS.setdefault(dialect, {})
    cache_key = (id(statement), keys)
    cached = plans.get(cache_key)
    if cached is not None and cached[0] is statement:
        return cached[1]
    plan = _compile(engine, statement, keys)
    plans[cache_key] = (statement, plan)
    return plan


def _compile(engine: Engine, statement: ClauseElement, keys: tuple[str, ...]) -> Plan | None:
    dialect = engine.dialect
    if dialect.driver not in DRIVERS:
        return None
    translate = engine.get_execution_options().get("schema_translate_map")
    compiled = statement.compile(
        dialect=dialect,
        column_keys=sorted(keys),
        schema_translate_map=translate,
        render_schema_translate=bool(translate),
    )
    assert isinstance(compiled, SQLCompiler)
    if (
        not compiled.positional
        or compiled.positiontup is None
        or compiled.insert_prefetch
        or compiled.update_prefetch
        or compiled.literal_execute_params
        or compiled.post_compile_params
    ):
        return None
    if compiled.escaped_bind_names or (
        dialect.driver == "asyncpg"
        and not (
            hasattr(dialect, "_invalidate_schema_cache_asof")
            and hasattr(dialect, "_invalidate_schema_cache")
        )
    ):
        # Renamed binds, or an asyncpg dialect without the statement-cache hooks this
        # module sets (``_before_execute``) and calls (``_raise_driver_error``): the
        # Connection path, rather than an append failing.
        return None
    # The binds' own processors, as their types give them to the dialect (what the
    # execution context applies); a tuple type's sequence of processors is not for here.
    processors: dict[str, Callable[[Any], Any]] = {}
    for name in set(compiled.positiontup):
        bind = compiled.binds[name]
        if isinstance(bind.type, TupleType):
            return None
        processor = bind.type.dialect_impl(dialect).bind_processor(dialect)
        if processor is not None:
            processors[name] = processor
    given = set(keys)
    # (``_collected_params``, SQLAlchemy 2.1: values a ``.params()`` call put on the
    # statement, merged into every execution's parameters.)
    by_name = not getattr(compiled, "_collected_params", None) and all(
        bind.key == name and name in given for bind, name in compiled.bind_names.items()
    )
    return Plan(
        sql=compiled.string,
        compiled=compiled,
        order=tuple(compiled.positiontup),
        processors=processors,
        sequence=dialect.execute_sequence_format,
        by_name=by_name,
    )


def execute_compiled(conn: Connection, statement: Executable, params: dict[str, Any]) -> Any:
    """``conn.execute(statement, params)``, for a large statement built once (a batch's
    multi-row INSERT): through the same ``Connection`` (its events, its transaction, its
    error handling), as the SQL of its plan with the values bound by the same type
    processors (``conn.exec_driver_sql``). SQLAlchemy's statement cache would compute the
    statement's cache key on every execution: for ten rows of the batch INSERT, 0.95 ms,
    more than the statement itself (bench/RESULTS.md, 2026-12-02). The result is a
    ``CursorResult`` with the driver's values (no result processors: for integer
    columns only). A statement that has no plan here runs as ``conn.execute``, and so
    does one whose values fail to bind."""
    plan = (
        plan_for(conn.engine, statement, tuple(params))
        if isinstance(statement, ClauseElement)
        else None
    )
    if plan is None:
        return conn.execute(statement, params)
    try:
        values = plan.values(params)
    except Exception:
        # A value its type cannot bind: raised, and reported to ``handle_error``, as the
        # Connection raises it (nothing was sent).
        return conn.execute(statement, params)
    return conn.exec_driver_sql(plan.sql, tuple(values))


def _bound(engine: Engine, plan: Plan, params: Mapping[str, Any]) -> Sequence[Any]:
    """``plan``'s values for ``params``; a value its type cannot bind raises the
    ``StatementError`` the execution context raises for it."""
    try:
        return plan.values(params)
    except Exception as exc:
        dialect = engine.dialect
        raise sa_exc.DBAPIError.instance(
            plan.sql,
            params,
            exc,
            dialect.loaded_dbapi.Error,
            hide_parameters=engine.hide_parameters,
            dialect=dialect,
        ) from exc


@contextlib.contextmanager
def pool_connection(engine: Engine) -> Iterator[PoolProxiedConnection]:
    """A connection checked out of ``engine``'s pool (a refused one raising as the
    ``Connection`` path raises it), returned at the end; invalidated when a cancellation, a
    timeout (asyncpg's ``command_timeout``) or a KeyboardInterrupt interrupts the work with
    a statement in flight (its state is unknown: SQLAlchemy's Connection invalidates it on
    the same rule)."""
    dialect = engine.dialect
    dbapi_error = dialect.loaded_dbapi.Error
    try:
        fairy = engine.raw_connection()
    except OSError as exc:
        raise refused_connection(exc) from exc
    except dbapi_error as exc:
        raise sa_exc.DBAPIError.instance(
            None,
            None,
            exc,
            dbapi_error,
            hide_parameters=engine.hide_parameters,
            connection_invalidated=dialect.is_disconnect(exc, None, None),
            dialect=dialect,
        ) from exc
    try:
        yield fairy
    except BaseException as exc:
        if is_exit_exception(exc) and fairy.is_valid:
            # asyncpg asks the server to cancel the interrupted statement on a connection
            # of its own: that request ends first (closing this connection under it leaves
            # its futures holding errors no one retrieves), as ``uow_slots``'
            # ``discard_cancelled`` waits for it.
            pending = getattr(fairy.driver_connection, "_cancellations", None)
            if pending:
                await_only(asyncio.gather(*list(pending), return_exceptions=True))
            fairy.invalidate(exc)
        raise
    finally:
        fairy.close()


@contextlib.contextmanager
def executed(
    engine: Engine, fairy: PoolProxiedConnection, plan: Plan, params: Mapping[str, Any]
) -> Iterator[Any]:
    """``plan`` executed with ``params`` on ``fairy``: its cursor, for the rows to be
    fetched in the block (a driver error there or in the execution raised as the
    ``Connection`` path raises it), closed at its end."""
    values = _bound(engine, plan, params)  # a value a type cannot bind: StatementError
    dialect = engine.dialect
    cursor = None
    try:
        # Opening the cursor too, as the execution context does inside the Connection's
        # error handling.
        cursor = fairy.cursor()
        _before_execute(dialect, cursor)
        for audit in DIRECT_AUDITORS:  # none outside the test suite
            audit(plan.sql)
        dialect.do_execute(cursor, plan.sql, values, None)
        yield cursor
    except dialect.loaded_dbapi.Error as exc:
        _raise_driver_error(engine, fairy, cursor, exc, plan.sql, values)
    finally:
        if cursor is not None:
            cursor.close()


def first_row(
    engine: Engine, plan: Plan, params: Mapping[str, Any], *, isolation_level: str | None
) -> Any:
    """In SQLAlchemy's greenlet: check a connection out of ``engine``'s pool, run
    ``plan`` with ``params`` on it (``isolation_level`` set for the statement and reset
    after, as the ``Connection`` path does for an engine's option), return the first
    row as a tuple (``None`` for no row) and the connection to the pool."""
    with (
        pool_connection(engine) as fairy,
        isolation(engine.dialect, fairy, isolation_level),
        executed(engine, fairy, plan, params) as cursor,
    ):
        row = cursor.fetchone()
    return tuple(row) if row is not None else None


@contextlib.contextmanager
def isolation(dialect: Dialect, fairy: PoolProxiedConnection, level: str | None) -> Iterator[None]:
    """``level`` set on ``fairy`` for the block and reset after (``None``: nothing)."""
    if level is None:
        yield
        return
    dialect.set_isolation_level(fairy.dbapi_connection, level)  # type: ignore[arg-type]
    try:
        yield
    except BaseException as exc:
        # An exit exception leaves the connection to be invalidated (``first_row``):
        # nothing more is done on it.
        if not is_exit_exception(exc) and fairy.is_valid:
            dialect.reset_isolation_level(fairy.dbapi_connection)  # type: ignore[arg-type]
        raise
    if fairy.is_valid:
        dialect.reset_isolation_level(fairy.dbapi_connection)  # type: ignore[arg-type]


def _before_execute(dialect: Dialect, cursor: Any) -> None:
    """What the driver's execution context does before a statement (``pre_exec``)."""
    if dialect.driver == "asyncpg":
        # The prepared-statement cache of the connection is checked against this.
        cursor._invalidate_schema_cache_asof = dialect._invalidate_schema_cache_asof  # type: ignore[attr-defined]


def _raise_driver_error(
    engine: Engine,
    fairy: PoolProxiedConnection,
    cursor: Any,
    exc: Exception,
    statement: str,
    values: Sequence[Any],
) -> NoReturn:
    """As ``Connection._handle_dbapi_exception``: wrapped, and on a disconnect the pool
    and the connection invalidated."""
    dialect = engine.dialect
    disconnect = dialect.is_disconnect(exc, fairy, cursor)  # type: ignore[arg-type]
    loaded = dialect.loaded_dbapi
    if dialect.driver == "asyncpg" and isinstance(
        exc, (loaded.InvalidCachedStatementError, loaded.InternalServerError)
    ):
        dialect._invalidate_schema_cache()  # type: ignore[attr-defined]
    wrapped = sa_exc.DBAPIError.instance(
        statement,
        values,
        exc,
        loaded.Error,
        hide_parameters=engine.hide_parameters,
        connection_invalidated=disconnect,
        dialect=dialect,
    )
    if disconnect:
        engine.pool._invalidate(fairy, exc)  # the pool's older connections, and this one
    raise wrapped from exc


def refused_connection(exc: OSError) -> DatabaseUnavailableError:
    """The error for a connection the database refused or never answered (``OSError``),
    on either path's checkout."""
    return DatabaseUnavailableError(f"cannot connect to the database: {exc}")
