"""Where things live by default: the opensquilla home, the embedded database, archives.

Every lookup happens when it is asked for (never at import), so a process, or a test,
that changes an environment variable is obeyed from the next call on.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

DSN_ENV = "OPENSQUILLA_SESSION_DSN"
_CREDENTIALS = re.compile(r"(://[^:/@\s]*):[^@\s]*@")
STATE_DIR_ENV = "OPENSQUILLA_STATE_DIR"
ARCHIVE_DIR_ENV = "OPENSQUILLA_SESSION_ARCHIVE_DIR"


def opensquilla_home() -> Path:
    """``$OPENSQUILLA_STATE_DIR`` (trimmed, ``~`` expanded), else ``~/.opensquilla``."""
    configured = os.environ.get(STATE_DIR_ENV, "").strip()
    if configured:
        return Path(configured).expanduser()
    return Path.home() / ".opensquilla"


def default_database_path() -> Path:
    """The embedded default database: ``<opensquilla home>/sessions.db``."""
    return opensquilla_home() / "sessions.db"


def archive_directory() -> Path:
    """Where reset archives go: ``$OPENSQUILLA_SESSION_ARCHIVE_DIR``, else the home's
    ``session-archive`` directory."""
    configured = os.environ.get(ARCHIVE_DIR_ENV, "").strip()
    if configured:
        return Path(configured).expanduser()
    return opensquilla_home() / "session-archive"


def resolve_dsn(explicit: str | None = None) -> str:
    """The DSN to use: ``explicit``, else ``$OPENSQUILLA_SESSION_DSN``, else the default file."""
    if explicit:
        return explicit
    configured = os.environ.get(DSN_ENV, "").strip()
    if configured:
        return configured
    return str(default_database_path())


def mask_password(text: str) -> str:
    """Hide the password of anything that looks like a URL with credentials."""
    return _CREDENTIALS.sub(r"\1:***@", text)
