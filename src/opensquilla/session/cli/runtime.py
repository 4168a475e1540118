"""Running one command: its database, its coroutine, its failures, its log lines.

Every command runs its work through :func:`run`, so every failure ends the same way: one
line on stderr (never a traceback, never a password) and an exit code. ``-v`` logging is
installed here too, with the same masking and escaping as error lines.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import typer
from rich.markup import escape

from ..config import mask_password, resolve_dsn
from ..errors import SessionStoreError
from ..manager import SessionManager
from ..storage import SessionStorage
from .render.text import err, no_controls

T = TypeVar("T")
log = logging.getLogger("opensquilla.session.cli")

EXIT_ERROR = 1
EXIT_CHECK_FAILED = 2
EXIT_INTERRUPTED = 130


@dataclass
class Options:
    """The global options, handed from the top-level callback to every command."""

    dsn: str | None = None


def dsn(ctx: typer.Context) -> str:
    """The database: ``--dsn``, else the environment, else the default file. An empty
    ``--dsn`` (an unset shell variable) is refused, never a fall-back."""
    options = ctx.find_object(Options)
    return resolve_dsn(options.dsn if options is not None else None, given_as="--dsn")


@contextlib.asynccontextmanager
async def open_manager(dsn: str, *, create: bool = True) -> AsyncIterator[SessionManager]:
    """A manager on its own storage, closed when the command is done. A command that only
    reads passes ``create=False``: a missing SQLite file is an error, never a new file."""
    async with SessionStorage(dsn, create=create) as storage:
        yield SessionManager(storage)


def _one_line(message: str) -> str:
    text = no_controls(mask_password(" ".join(message.split())), keep_line_breaks=False)
    return text or "unknown error"


def fail(message: str, code: int = EXIT_ERROR) -> typer.Exit:
    """Print ``message`` as the one error line and return the exit to raise."""
    err.print(f"error: {escape(_one_line(message))}")
    return typer.Exit(code)


def run(work: Callable[[], Awaitable[T]]) -> T:
    """Run one command's coroutine; every failure becomes one line and an exit code.

    ``work`` is called inside the guarded loop, so whatever it evaluates first (the DSN,
    a parsed option) fails the same way as the work itself."""

    async def main() -> T:
        return await work()

    try:
        return asyncio.run(main())
    except (typer.Exit, typer.Abort, typer.TyperException):
        raise
    except KeyboardInterrupt:
        err.print("interrupted; whatever was committed stays (a copy can simply be re-run)")
        raise typer.Exit(EXIT_INTERRUPTED) from None
    except SessionStoreError as exc:
        log.debug("command failed", exc_info=True)
        raise fail(str(exc)) from None
    except RecursionError:
        log.debug("command failed", exc_info=True)
        raise fail("a value is nested too deeply to process") from None
    except OSError as exc:
        log.debug("command failed", exc_info=True)
        where = f": {exc.filename}" if exc.filename else ""
        raise fail(f"{exc.strerror or exc}{where}") from None
    except Exception as exc:
        log.debug("command failed", exc_info=True)
        raise fail(f"{type(exc).__name__}: {exc}") from None


# -- logging (-v) ----------------------------------------------------------------------


class _SafeFormatter(logging.Formatter):
    """Log lines for a terminal: passwords masked, control characters shown as escapes
    (a session key or a stored value in a message can hold anything)."""

    def format(self, record: logging.LogRecord) -> str:
        return no_controls(mask_password(super().format(record)))


class _LogContext(logging.Filter):
    """Give every record the ``session_key`` and ``operation`` the format shows."""

    def filter(self, record: logging.LogRecord) -> bool:
        for name in ("session_key", "operation"):
            if not hasattr(record, name):
                setattr(record, name, "-")
        return True


_handler: logging.Handler | None = None


def stop_logging() -> None:
    """Remove the handler :func:`configure_logging` installed (one per invocation: tests
    run many commands in one process)."""
    global _handler
    if _handler is not None:
        logging.getLogger("opensquilla").removeHandler(_handler)
        _handler = None


def configure_logging(verbosity: int) -> None:
    """Log the package to stderr: INFO with ``-v``, DEBUG with ``-vv``."""
    global _handler
    package = logging.getLogger("opensquilla")
    stop_logging()
    _handler = logging.StreamHandler(sys.stderr)
    _handler.addFilter(_LogContext())
    _handler.setFormatter(
        _SafeFormatter(
            "%(asctime)s %(levelname)s %(name)s [%(operation)s %(session_key)s] %(message)s"
        )
    )
    package.addHandler(_handler)
    package.setLevel(logging.DEBUG if verbosity > 1 else logging.INFO)
