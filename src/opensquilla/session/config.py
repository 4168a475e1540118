"""Where things live by default: the opensquilla home, the embedded database, archives.

Every lookup happens when it is asked for (never at import), so a process, or a test,
that changes an environment variable is obeyed from the next call on.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Literal, get_args

from .errors import ConfigurationError

DSN_ENV = "OPENSQUILLA_SESSION_DSN"
# The documentation site ([project.urls] Documentation in pyproject.toml, site_url in
# mkdocs.yml; tests/docs checks that the three agree). The demo links its terms into it.
DOCUMENTATION_URL = "https://opensquilla.github.io/opensquilla-session/"
GLOSSARY_URL = DOCUMENTATION_URL + "glossary/"
# "user:password@" after a "/": in "scheme://", and in mangled schemes too ("postgresql:/",
# "postgresql//"). The user part holds no ":", "/" or "@"; the password runs to the *last*
# "@" of the word, since a raw password may hold "@" or "/" itself (over-masking is
# harmless, a leak is not). A password never starts with "/": that would be "scheme:/".
# Text without a "/" before the user ("agent:main:ana@example.com", a session key) is left
# alone; strings refused as URL-shaped are masked more bluntly where they are refused.
_CREDENTIALS = re.compile(r"""(?<=/)([^\s:/@'"]*):(?!/)[^\s'"]*@""")
# Secret-looking parameters (URL query or libpq key=value): password, sslpassword, passwd,
# pwd, secret, token, api keys, credentials.
_SECRET_PARAMETER = re.compile(
    r"""(?i)(\b[a-z_]*(?:pass(?:word|wd)?|pwd|secret|token|api[_-]?key|credentials?)\s*=\s*)"""
    r"""('[^']*'|"[^"]*"|[^\s&;#'"]*)"""
)
STATE_DIR_ENV = "OPENSQUILLA_STATE_DIR"
ARCHIVE_DIR_ENV = "OPENSQUILLA_SESSION_ARCHIVE_DIR"
ARCHIVE_STORE_ENV = "OPENSQUILLA_SESSION_ARCHIVE_STORE"
ArchiveStore = Literal["files", "database"]
ARCHIVE_STORES: tuple[ArchiveStore, ...] = get_args(ArchiveStore)
SQLITE_SYNCHRONOUS_ENV = "OPENSQUILLA_SQLITE_SYNCHRONOUS"
SqliteSynchronous = Literal["OFF", "NORMAL", "FULL", "EXTRA"]
SQLITE_SYNCHRONOUS_LEVELS: tuple[SqliteSynchronous, ...] = get_args(SqliteSynchronous)


def opensquilla_home() -> Path:
    """``$OPENSQUILLA_STATE_DIR`` (trimmed, ``~`` expanded), else ``~/.opensquilla``."""
    configured = os.environ.get(STATE_DIR_ENV, "").strip()
    if configured:
        return Path(configured).expanduser()
    return Path.home() / ".opensquilla"


def default_database_path() -> Path:
    """The embedded default database: ``<opensquilla home>/sessions.db``."""
    return opensquilla_home() / "sessions.db"


def archive_directory(setting: str | os.PathLike[str] | None = None) -> Path:
    """Where reset archives go: ``setting`` (a storage's ``archive_dir``, ``~`` expanded),
    else ``$OPENSQUILLA_SESSION_ARCHIVE_DIR``, else the home's ``session-archive``."""
    if setting is not None:
        return Path(setting).expanduser()
    configured = os.environ.get(ARCHIVE_DIR_ENV, "").strip()
    if configured:
        return Path(configured).expanduser()
    return opensquilla_home() / "session-archive"


def archive_store(setting: str | None = None) -> ArchiveStore:
    """Where reset archives go: ``setting`` (a storage's ``archive_store``), else
    ``$OPENSQUILLA_SESSION_ARCHIVE_STORE`` (trimmed, any case), else ``files``; one of
    :data:`ARCHIVE_STORES`, anything else refused naming where it came from."""
    given_as, value = "archive_store", setting
    if setting is None:
        given_as, value = f"${ARCHIVE_STORE_ENV}", os.environ.get(ARCHIVE_STORE_ENV, "").strip()
        value = value.lower() or "files"
    if value not in ARCHIVE_STORES:
        raise ConfigurationError(
            f"{given_as} must be one of {', '.join(ARCHIVE_STORES)}, not {value!r}"[:200]
        )
    return value


def sqlite_synchronous(setting: object = None) -> SqliteSynchronous:
    """SQLite's ``PRAGMA synchronous`` for a store's connections: ``setting`` (a storage's
    ``sqlite_synchronous``, any case), else ``$OPENSQUILLA_SQLITE_SYNCHRONOUS`` (trimmed, any
    case), else ``FULL``; one of :data:`SQLITE_SYNCHRONOUS_LEVELS`, anything else refused
    naming where it came from. The variable is read when the storage is created.

    ``FULL`` makes every commit durable across a power loss. ``NORMAL`` (in WAL mode) and
    ``OFF`` still survive the process being killed, since the operating system holds what
    was written; they can lose the last commits if the machine itself goes down."""
    given_as, value = "sqlite_synchronous", setting
    if setting is None:
        given_as = f"${SQLITE_SYNCHRONOUS_ENV}"
        value = os.environ.get(SQLITE_SYNCHRONOUS_ENV, "").strip() or "FULL"
    level = value.upper() if isinstance(value, str) else None
    if level not in SQLITE_SYNCHRONOUS_LEVELS:
        raise ConfigurationError(
            f"{given_as} must be one of {', '.join(SQLITE_SYNCHRONOUS_LEVELS)}, not {value!r}"[:200]
        )
    return level


def resolve_dsn(explicit: str | None = None, *, given_as: str = "the DSN") -> str:
    """The DSN to use: ``explicit``, else ``$OPENSQUILLA_SESSION_DSN``, else the default file.

    ``explicit`` is ``None`` when nothing was given. Given but empty or blank (typically an
    unset shell variable, ``--dsn "$TYPO"``) is refused: falling back to the environment
    or the default file would run the command, perhaps a deletion, on a database the
    operator did not name. ``given_as`` names the option in the message.
    """
    if explicit is not None:
        if not explicit.strip():
            raise ConfigurationError(
                f"{given_as} was given but is empty (an unset variable?); name the database "
                f"(a SQLite path or a postgresql:// URL), or leave {given_as} out to use "
                f"${DSN_ENV} or the default {default_database_path()}"
            )
        return explicit
    configured = os.environ.get(DSN_ENV, "").strip()
    if configured:
        return configured
    return str(default_database_path())


def mask_password(text: str) -> str:
    """Hide every password-like part of ``text``: the password of anything shaped like a URL
    with credentials (well-formed or not) and the value of every secret-looking parameter
    (``?password=``, ``sslpassword=``, ``token=``...)."""
    masked = _CREDENTIALS.sub(r"\1:***@", text)
    return _SECRET_PARAMETER.sub(r"\1***", masked)
