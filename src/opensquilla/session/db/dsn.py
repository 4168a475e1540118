"""Storage targets: ``":memory:"``, a filesystem path, or a SQLAlchemy URL.

Plain ``sqlite://`` and ``postgresql://`` (or ``postgres://``) URLs are normalised to the
async drivers. Anything else is refused with an error naming the accepted forms; the
password of a URL never appears in an error or a ``repr``.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from ..config import mask_password
from ..errors import ConfigurationError

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


@dataclass(frozen=True)
class StorageTarget:
    url: URL
    backend: Backend
    path: Path | None  # the SQLite file; None for ':memory:' and Postgres

    @property
    def memory(self) -> bool:
        return self.backend == "sqlite" and self.path is None

    def render(self) -> str:
        """The URL as text, password hidden: safe for logs, errors and reprs."""
        return self.url.render_as_string(hide_password=True)


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
            f"{mask_password(text)!r} looks like a database URL but has no '://'; "
            f"accepted forms: {ACCEPTED_FORMS}"
        )
    if "\x00" in text:
        raise ConfigurationError("storage path must not contain NUL characters")
    return _sqlite_file(Path(text))


def _sqlite_file(path: Path) -> StorageTarget:
    resolved = path.expanduser().absolute()
    url = URL.create("sqlite+aiosqlite", database=str(resolved))
    return StorageTarget(url, "sqlite", resolved)


def _from_url(text: str) -> StorageTarget:
    try:
        url = make_url(text)
    except (ArgumentError, ValueError):
        # `from None`: the parser's own message may quote the URL, password included.
        raise ConfigurationError(
            f"cannot parse database URL {mask_password(text)!r}; accepted forms: {ACCEPTED_FORMS}"
        ) from None
    backend, _, driver = url.drivername.partition("+")
    if backend == "sqlite":
        if driver not in ("", "aiosqlite"):
            raise _refuse_driver(url, "sqlite", driver)
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
        if port is not None and not 0 < port < 65536:
            raise ConfigurationError(
                f"invalid port in {url.render_as_string(hide_password=True)!r}"
            )
        return StorageTarget(url.set(drivername="postgresql+asyncpg"), "postgresql", None)
    raise ConfigurationError(
        f"unsupported database {backend!r} in {url.render_as_string(hide_password=True)!r}; "
        f"accepted forms: {ACCEPTED_FORMS}"
    )


def _refuse_driver(url: URL, backend: str, driver: str) -> ConfigurationError:
    wanted = "aiosqlite" if backend == "sqlite" else "asyncpg"
    return ConfigurationError(
        f"driver {driver!r} in {url.render_as_string(hide_password=True)!r} is not an async "
        f"driver; use {backend}+{wanted}:// (or plain {backend}://). "
        f"Accepted forms: {ACCEPTED_FORMS}"
    )
