"""Storage targets: ``":memory:"``, a filesystem path, or a SQLAlchemy URL.

Plain ``sqlite://`` and ``postgresql://`` (or ``postgres://``) URLs are normalised to the
async drivers. Anything else is refused with an error naming the accepted forms; the
password of a URL never appears in an error or a ``repr``.

A string shaped like a URL (a scheme without ``://``, a leading ``//``, ``user:pw@``, a
query string, a ``password=`` parameter) is never taken for a file path: a mistyped
``postgresql//app:pw@host/db`` would otherwise become a SQLite file whose directory names
are the password. ``?password=...`` (which asyncpg accepts) is moved into the URL's
password, where every rendering hides it.

``?schema=NAME`` (PostgreSQL only) puts the store's tables in that schema
(``db/pg_schema.py``); it is taken out of the URL the driver sees.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from ..config import mask_password
from ..errors import ConfigurationError, StoragePathError
from .engine_options import postgres_connection
from .pg_schema import checked_schema

Backend = Literal["sqlite", "postgresql"]

ACCEPTED_FORMS = (
    "':memory:', a filesystem path, 'sqlite:///path' or 'sqlite+aiosqlite:///path', "
    "'postgresql://user@host/db' or 'postgresql+asyncpg://user@host/db'"
)
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://")
# "postgresql:/host/db", "sqlite:x.db": a URL missing its slashes, not a file name.
_MALFORMED_URL = re.compile(
    r"^(?:postgres(?:ql)?|sqlite|mysql|mariadb|oracle|mssql)(?:\+\w+)?:", re.IGNORECASE
)
# Shapes no file name a person means has; each refuses the string whatever it starts with.
_Shapes = tuple[tuple[re.Pattern[str], str], ...]
_ALWAYS_URL_SHAPED: _Shapes = (
    (re.compile(r"^//"), "it starts with '//'"),
    (re.compile(r":[^\s]*@"), "it holds credentials ('user:password@')"),
    (
        re.compile(r"(?i)\b[a-z_]*(?:pass(?:word|wd)?|pwd|secret|token)\s*="),
        "it holds a password parameter",
    ),
)
# Shapes refused in a bare relative name only: "./name:x" or an absolute path is a path.
_BARE_URL_SHAPED: _Shapes = (
    (re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*:"), "it starts with a scheme ('name:')"),
    (re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*//"), "a scheme is missing its ':'"),
    (re.compile(r"\?[^/]*="), "it has a query string"),
)
_EXPLICIT_PATH = ("/", "./", "../", "~")
# The password part of a refused string, bluntly: from the first ":" not starting a "/"
# to the last "@" (the user may go with it; nothing of the password stays).
_BLUNT_CREDENTIALS = re.compile(r":(?!/)\S*@")
_QUERY_PASSWORD = "password"
_QUERY_SCHEMA = "schema"
# "?schema=" with no value, which the URL parser drops without a word.
_EMPTY_SCHEMA = re.compile(r"[?&]schema=(?:&|#|$)")


def _masked(text: str) -> str:
    """A string that failed to parse, safe to show: every password-like part hidden."""
    return _BLUNT_CREDENTIALS.sub(":***@", mask_password(text), count=1)


def _url_shape(text: str) -> str | None:
    """Why ``text`` looks like a URL rather than a file path, or ``None``."""
    shapes = _ALWAYS_URL_SHAPED
    if not text.startswith(_EXPLICIT_PATH):
        shapes = _BARE_URL_SHAPED + shapes
    for pattern, reason in shapes:
        if pattern.search(text):
            return reason
    return None


@dataclass(frozen=True)
class StorageTarget:
    url: URL
    backend: Backend
    path: Path | None  # the SQLite file; None for ':memory:' and Postgres
    schema: str | None = None  # the PostgreSQL schema of the store's tables (None: default)

    @property
    def memory(self) -> bool:
        return self.backend == "sqlite" and self.path is None

    def render(self) -> str:
        """The URL as text, password and secret-looking parameters hidden: safe for logs,
        errors, reprs and ``--json`` output."""
        shown = self.url.render_as_string(hide_password=True)
        if self.schema is not None:
            shown += f"{'&' if self.url.query else '?'}{_QUERY_SCHEMA}={self.schema}"
        return mask_password(shown)

    def __repr__(self) -> str:
        # The dataclass repr would show ``url``, query parameters and all.
        return f"StorageTarget({self.render()!r}, backend={self.backend!r})"

    def __str__(self) -> str:
        return self.render()


def with_schema(target: StorageTarget, schema: str | None) -> StorageTarget:
    """``target`` with the store's tables in ``schema`` (PostgreSQL only; given both in the
    URL and as a setting, the two must agree)."""
    if schema is None:
        return target
    if target.backend != "postgresql":
        raise _schema_on_sqlite()
    schema = checked_schema(schema)
    if target.schema is not None and target.schema != schema:
        raise ConfigurationError(
            f"schema {schema!r} was given, but the URL names schema {target.schema!r}; give it once"
        )
    return replace(target, schema=schema)


def _schema_on_sqlite() -> ConfigurationError:
    return ConfigurationError(
        "a schema is a PostgreSQL setting: a SQLite database has no schemas (the store's "
        "tables share the file with whatever else is in it); drop the schema, or use "
        "another file"
    )


def parse_target(target: str | os.PathLike[str]) -> StorageTarget:
    if isinstance(target, os.PathLike):
        return _sqlite_file(Path(os.fspath(target)))
    if not isinstance(target, str):
        raise ConfigurationError(
            f"storage target must be a string or a path, not {type(target).__name__}; "
            f"accepted forms: {ACCEPTED_FORMS}"
        )
    text = target.strip()
    if not text:
        raise ConfigurationError(f"storage target is empty; accepted forms: {ACCEPTED_FORMS}")
    if text == ":memory:":
        return StorageTarget(make_url("sqlite+aiosqlite://"), "sqlite", None)
    if _SCHEME.match(text):
        return _from_url(text)
    if _MALFORMED_URL.match(text):
        raise ConfigurationError(
            f"{_masked(text)!r} looks like a database URL but has no '://'; "
            f"accepted forms: {ACCEPTED_FORMS}"
        )
    reason = _url_shape(text)
    if reason is not None:
        raise ConfigurationError(
            f"{_masked(text)!r} looks like a database URL, not a file path ({reason}); "
            f"accepted forms: {ACCEPTED_FORMS}. A file whose name merely looks like this: "
            "rename it, or write a relative name as ./NAME"
        )
    if "\x00" in text:
        raise ConfigurationError("storage path must not contain NUL characters")
    return _sqlite_file(Path(text))


def _sqlite_file(path: Path) -> StorageTarget:
    try:
        os.fsencode(path)
    except UnicodeEncodeError:
        raise StoragePathError(
            f"storage path {shown_path(path)} cannot be a file name: it holds an unpaired "
            "surrogate code point, which the file system encoding cannot encode"
        ) from None
    resolved = path.expanduser().absolute()
    url = URL.create("sqlite+aiosqlite", database=str(resolved))
    return StorageTarget(url, "sqlite", resolved)


def shown_path(path: Path | str) -> str:
    """A path for a one-line message: unencodable and control characters escaped, and a
    very long path cut (its length said)."""
    text = str(path).encode("utf-8", "backslashreplace").decode("utf-8")
    text = "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in text)
    if len(text) > 120:
        return f"'{text[:60]}...' ({len(str(path))} characters)"
    return f"'{text}'"


def _from_url(text: str) -> StorageTarget:
    if _EMPTY_SCHEMA.search(text):
        raise ConfigurationError("the URL's schema parameter is empty; name a schema or drop it")
    try:
        url = make_url(text)
    except (ArgumentError, ValueError):
        # `from None`: the parser's own message may quote the URL, password included.
        raise ConfigurationError(
            f"cannot parse database URL {_masked(text)!r}; accepted forms: {ACCEPTED_FORMS}"
        ) from None
    backend, _, driver = url.drivername.partition("+")
    if backend == "sqlite":
        if driver not in ("", "aiosqlite"):
            raise _refuse_driver(url, "sqlite", driver)
        if _QUERY_SCHEMA in url.query:
            raise _schema_on_sqlite()
        if url.query:
            raise ConfigurationError(
                f"SQLite URLs take no query parameters (got {', '.join(sorted(url.query))}) "
                f"in {_render(url)!r}; accepted forms: {ACCEPTED_FORMS}"
            )
        url = url.set(drivername="sqlite+aiosqlite")
        database = url.database or ""
        if database in ("", ":memory:"):
            # Not `url.set(database=None)`: `set` treats None as "leave unchanged".
            return StorageTarget(make_url("sqlite+aiosqlite://"), "sqlite", None)
        return _sqlite_file(Path(database))
    if backend in ("postgresql", "postgres"):
        if driver not in ("", "asyncpg"):
            raise _refuse_driver(url, "postgresql", driver)
        try:
            port = url.port
        except ValueError:
            port = -1
        url = _password_from_query(url)
        url, schema = _schema_from_query(url)
        _check_query(url)
        if port is not None and not 0 < port < 65536:
            raise ConfigurationError(
                f"invalid port in {_render(url)!r}; accepted forms: {ACCEPTED_FORMS}"
            )
        return StorageTarget(url.set(drivername="postgresql+asyncpg"), "postgresql", None, schema)
    raise ConfigurationError(
        f"unsupported database {backend!r} in {_render(url)!r}; accepted forms: {ACCEPTED_FORMS}"
    )


def engine_target(url: URL) -> StorageTarget:
    """The target of an application's engine: a SQLite file on aiosqlite or PostgreSQL on
    asyncpg. An in-memory SQLite engine is refused: its database lives in one connection,
    which SQLAlchemy replaces (with a new, empty database) after an interrupted operation;
    the store's own ``':memory:'`` keeps that connection for the store's whole life."""
    backend, _, driver = url.drivername.partition("+")
    if (backend, driver) == ("sqlite", "aiosqlite"):
        if (url.database or ":memory:") == ":memory:":
            raise ConfigurationError(
                "an in-memory SQLite engine cannot be shared with the store (its database "
                "would vanish with a replaced connection); pass ':memory:' instead"
            )
        return _sqlite_file(Path(url.database or ""))
    if (backend, driver) == ("postgresql", "asyncpg"):
        return StorageTarget(url, "postgresql", None)
    raise ConfigurationError(
        f"the engine uses {url.drivername!r}; the store runs on sqlite+aiosqlite or "
        "postgresql+asyncpg engines"
    )


def _render(url: URL) -> str:
    return mask_password(url.render_as_string(hide_password=True))


def _password_from_query(url: URL) -> URL:
    """``?password=...`` moved into the URL's password (where the query wins, as it does
    for the driver): every rendering of a URL hides its password, none hides a query."""
    if _QUERY_PASSWORD not in url.query:
        return url
    given = url.query[_QUERY_PASSWORD]
    password = given[-1] if isinstance(given, tuple) else given
    return url.difference_update_query([_QUERY_PASSWORD]).set(password=password)


def _schema_from_query(url: URL) -> tuple[URL, str | None]:
    """``?schema=NAME`` taken out of the URL (asyncpg would refuse it)."""
    if _QUERY_SCHEMA not in url.query:
        return url, None
    given = url.query[_QUERY_SCHEMA]
    if isinstance(given, tuple):
        if len(set(given)) != 1:
            raise ConfigurationError(f"the URL names several schemas: {', '.join(given)}"[:200])
        given = given[0]
    return url.difference_update_query([_QUERY_SCHEMA]), checked_schema(given)


def _check_query(url: URL) -> None:
    """Refuse, by name, query parameters asyncpg would not take (SQLAlchemy hands each one
    to ``asyncpg.connect()`` as a keyword: an unknown one would fail the first connection
    with a bare ``TypeError``), and values it could not use."""
    try:
        postgres_connection(url)
    except ConfigurationError as exc:
        raise ConfigurationError(f"{exc} (in {_render(url)!r})") from None


def _refuse_driver(url: URL, backend: str, driver: str) -> ConfigurationError:
    wanted = "aiosqlite" if backend == "sqlite" else "asyncpg"
    return ConfigurationError(
        f"driver {driver!r} in {_render(url)!r} is not an async "
        f"driver; use {backend}+{wanted}:// (or plain {backend}://). "
        f"Accepted forms: {ACCEPTED_FORMS}"
    )
