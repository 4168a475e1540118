"""The one seam where SQLAlchemy and driver exceptions become the package's errors.

Only exceptions that came from the database or from binding a value are translated, always
``raise ... from exc``. Anything else (an exception the caller raised, a failure a test
injected, a cancellation) passes through unchanged.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from sqlalchemy import exc as sa_exc

from ..errors import (
    DatabaseError,
    DatabaseNotFoundError,
    DatabaseUnavailableError,
    IntegrityViolationError,
    InvalidInputError,
    SessionStoreError,
)

_PG_REFUSED_CHARACTER = {"22021", "22P05"}  # character_not_in_repertoire, untranslatable
_PG_OUT_OF_RANGE = "22003"  # numeric_value_out_of_range: a counter past its column's type
_PG_PROGRAM_LIMIT = "54000"  # program_limit_exceeded: e.g. an index entry that is too large
_PG_NO_DATABASE = "3D000"  # invalid_catalog_name: the URL names a database the server lacks
# An outage, not a refusal: the server cannot serve this connection now (retry later).
_PG_UNAVAILABLE_CLASSES = ("08",)  # connection_exception: 08000, 08001, 08003, 08006, ...
_PG_UNAVAILABLE = {
    "53300",  # too_many_connections: out of connection slots
    "57P01",  # admin_shutdown: the server is shutting down (or this backend was terminated)
    "57P02",  # crash_shutdown: another backend crashed, the server is restarting
    "57P03",  # cannot_connect_now: the server is starting up or shutting down
    "57P05",  # idle_session_timeout: the server closed the session
    "25P03",  # idle_in_transaction_session_timeout: the server closed the session
}


def is_unavailable_sqlstate(sqlstate: str | None) -> bool:
    """Whether a SQLSTATE says the server is (for now) not serving this connection: a
    caller's retry-on-unavailable must see the whole of a restart, whichever of these
    codes each connection attempt met."""
    if sqlstate is None:
        return False
    return sqlstate in _PG_UNAVAILABLE or sqlstate.startswith(_PG_UNAVAILABLE_CLASSES)


def _driver_message(exc: sa_exc.DBAPIError) -> str:
    orig = exc.orig
    text = str(orig) if orig is not None else str(exc)
    return " ".join(text.split())[:500]


def _sqlstate(exc: sa_exc.DBAPIError) -> str | None:
    orig = exc.orig
    code = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    if code is None:
        cause = getattr(orig, "__cause__", None)
        code = getattr(cause, "sqlstate", None)
    return code if isinstance(code, str) else None


def _encode_error_in_chain(exc: BaseException) -> UnicodeEncodeError | None:
    """asyncpg reports an unencodable argument as a ``DataError`` caused by the
    ``UnicodeEncodeError``; find it along the driver's cause chain."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, UnicodeEncodeError):
            return current
        seen.add(id(current))
        current = current.__cause__ or getattr(current, "orig", None)
    return None


def translate(exc: BaseException) -> SessionStoreError | None:
    """The package error for ``exc``, or ``None`` when ``exc`` is not ours to translate."""
    if isinstance(exc, SessionStoreError):
        return None
    if isinstance(exc, UnicodeEncodeError):
        return InvalidInputError(
            "text holds an unpaired surrogate code point, which cannot be stored as UTF-8; "
            "nothing was written"
        )
    if isinstance(exc, OverflowError):
        # sqlite3 binds a Python int outside 64 bits with a bare OverflowError, which
        # SQLAlchemy passes through unwrapped.
        return InvalidInputError(
            f"an integer is outside the 64-bit range the database stores ({exc}); "
            "nothing was written"
        )
    if isinstance(exc, sa_exc.DBAPIError):
        encode_error = _encode_error_in_chain(exc.orig) if exc.orig is not None else None
        if encode_error is not None:
            return translate(encode_error)
        message = _driver_message(exc)
        sqlstate = _sqlstate(exc)
        if (
            exc.connection_invalidated
            or isinstance(exc, sa_exc.InterfaceError)
            or is_unavailable_sqlstate(sqlstate)
        ):
            return DatabaseUnavailableError(f"database connection failed: {message}")
        if isinstance(exc, sa_exc.IntegrityError):
            return IntegrityViolationError(f"database refused the change: {message}")
        if sqlstate == _PG_NO_DATABASE:
            return DatabaseNotFoundError(
                f"{message} on the server; nothing was created (the store creates tables, "
                "not databases: CREATE DATABASE first)"
            )
        if sqlstate in _PG_REFUSED_CHARACTER:
            return InvalidInputError(
                "PostgreSQL refused a text value (a NUL character in an identifier or other "
                f"field that is not stored losslessly); nothing was written: {message}"
            )
        if sqlstate == _PG_OUT_OF_RANGE:
            return InvalidInputError(
                f"a number is out of range for its column; nothing was written: {message}"
            )
        if sqlstate is not None and (sqlstate.startswith("22") or sqlstate == _PG_PROGRAM_LIMIT):
            # Class 22 is "data exception": the value, not the database, is the problem
            # (asyncpg reports an argument it cannot encode, such as an int outside int64,
            # as 22000 before anything is sent).
            return InvalidInputError(
                f"the database refused a value; nothing was written: {message}"
            )
        return DatabaseError(f"database error: {message}")
    if isinstance(exc, sa_exc.StatementError):
        orig = exc.orig
        if isinstance(orig, UnicodeEncodeError):
            return translate(orig)
        if isinstance(orig, RecursionError):
            return InvalidInputError("a JSON value is nested too deeply to store")
        if isinstance(orig, TypeError | ValueError | OverflowError):
            return InvalidInputError(f"a value cannot be stored: {orig}; nothing was written")
        return DatabaseError(f"statement failed: {orig}")
    if isinstance(exc, sa_exc.SQLAlchemyError):
        return DatabaseError(f"database layer error: {exc}")
    return None


def leaves_connection_in_doubt(exc: BaseException) -> bool:
    """Whether a connection on which ``exc`` escaped may no longer be in a known state:
    anything the database, the driver or SQLAlchemy raised (what :func:`translate` maps).
    Our own errors and the caller's exceptions are raised between statements: a rollback
    is enough."""
    if not isinstance(exc, Exception) or isinstance(exc, SessionStoreError):
        return False
    return translate(exc) is not None


@contextlib.asynccontextmanager
async def translated_errors() -> AsyncIterator[None]:
    try:
        yield
    except Exception as exc:
        mapped = translate(exc)
        if mapped is None:
            raise
        raise mapped from exc
