"""``opensquilla-session``: the operator's command line.

A thin layer: it parses options, calls the manager, the storage, ``admin``, ``transfer`` or
``demo``, and prints the result (rich text for people, ``--json`` for scripts). The DSN is
``--dsn``, else ``$OPENSQUILLA_SESSION_DSN``, else the embedded default file.

Exit codes: 0 done; 1 an error (one line on stderr, never a traceback or a password);
2 a check that found a problem (``db check``, ``copy`` conflicts or verification) or a
usage error (an unknown option, a value out of its range); 130 interrupted.

Stored text is shown, never obeyed: rich markup in it is escaped, and control characters
(ESC sequences, carriage returns, bells, bidirectional overrides...) are shown as ``\\x1b``
-style escapes. ``--json`` output is strict JSON: non-finite floats are the strings
``"NaN"``, ``"Infinity"`` and ``"-Infinity"`` (as in the export format), control characters
are ``\\u`` escapes, and values nested as deeply as the store accepts are written like any
other (the encoder is iterative).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from pydantic import BaseModel
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from . import admin, migrate, transfer
from .compaction import CompactionConfig
from .config import mask_password, resolve_dsn
from .demo import run_demo
from .errors import InvalidInputError, SessionNotFoundError, SessionStoreError
from .jsontext import TERMINAL_CONTROLS, strict_json
from .manager import SessionManager
from .models import FlushReceiptStatus, SessionStatus, SessionSummary, TranscriptEntry
from .operations import DeletionPreview
from .storage import SessionStorage

T = TypeVar("T")
log = logging.getLogger("opensquilla.session.cli")

EXIT_ERROR = 1
EXIT_CHECK_FAILED = 2
EXIT_INTERRUPTED = 130
INT64_MAX = 2**63 - 1  # the largest count, id or age (ms) the store can hold or compare
MAX_JOBS = 64  # copy's concurrent target transactions (each holds a connection)
MAX_BATCH = 100_000  # copy's sessions per source snapshot (held in memory at once)
_DAY_MS = 86_400_000
# Characters a terminal would act on rather than show: C0 and C1 controls (ESC, CSI, BEL,
# CR, backspace...), DEL, line and paragraph separators, bidirectional overrides.
_CONTROL = re.compile(f"[{TERMINAL_CONTROLS}]")
_CONTROL_OR_BREAK = re.compile(f"[\t\n{TERMINAL_CONTROLS}]")
_SHORT_ESCAPES = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}
_PREVIEW = 2000

app = typer.Typer(
    name="opensquilla-session",
    help="Operate an opensquilla session store (SQLite file or PostgreSQL).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Plain click messages: a usage error is its one "Error: ..." line, not a framed box.
    rich_markup_mode=None,
)
db_app = typer.Typer(help="Schema migrations (Alembic).", no_args_is_help=True)
sessions_app = typer.Typer(help="List and inspect sessions.", no_args_is_help=True)
repair_app = typer.Typer(help="The degraded-compaction repair queue.", no_args_is_help=True)
app.add_typer(db_app, name="db")
app.add_typer(sessions_app, name="sessions")
app.add_typer(repair_app, name="repair")

# emoji=False: ":b:" in a key is text, not an emoji code.
out = Console(highlight=False, soft_wrap=True, emoji=False)
err = Console(stderr=True, highlight=False, soft_wrap=True, emoji=False)


@dataclass
class Options:
    dsn: str | None = None


# -- plumbing --------------------------------------------------------------------------


def _show_control(match: re.Match[str]) -> str:
    char = match.group()
    if char in _SHORT_ESCAPES:
        return _SHORT_ESCAPES[char]
    code = ord(char)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def _no_controls(text: str, *, keep_line_breaks: bool = True) -> str:
    """``text`` with every terminal control shown as an escape (and, unless
    ``keep_line_breaks``, newlines and tabs too)."""
    return (_CONTROL if keep_line_breaks else _CONTROL_OR_BREAK).sub(_show_control, text)


class _SafeFormatter(logging.Formatter):
    """Log lines for a terminal: passwords masked, control characters shown as escapes
    (a session key or a stored value in a message can hold anything)."""

    def format(self, record: logging.LogRecord) -> str:
        return _no_controls(mask_password(super().format(record)))


class _LogContext(logging.Filter):
    """Give every record the ``session_key`` and ``operation`` the format shows."""

    def filter(self, record: logging.LogRecord) -> bool:
        for name in ("session_key", "operation"):
            if not hasattr(record, name):
                setattr(record, name, "-")
        return True


_handler: logging.Handler | None = None


def _stop_logging() -> None:
    global _handler
    if _handler is not None:
        logging.getLogger("opensquilla").removeHandler(_handler)
        _handler = None


def _configure_logging(verbosity: int) -> None:
    global _handler
    package = logging.getLogger("opensquilla")
    _stop_logging()
    _handler = logging.StreamHandler(sys.stderr)
    _handler.addFilter(_LogContext())
    _handler.setFormatter(
        _SafeFormatter(
            "%(asctime)s %(levelname)s %(name)s [%(operation)s %(session_key)s] %(message)s"
        )
    )
    package.addHandler(_handler)
    package.setLevel(logging.DEBUG if verbosity > 1 else logging.INFO)


def _dsn(ctx: typer.Context) -> str:
    """The database: ``--dsn``, else the environment, else the default file. An empty
    ``--dsn`` (an unset shell variable) is refused, never a fall-back."""
    options = ctx.find_object(Options)
    return resolve_dsn(options.dsn if options is not None else None, given_as="--dsn")


def _one_line(message: str) -> str:
    text = _no_controls(mask_password(" ".join(message.split())), keep_line_breaks=False)
    return text or "unknown error"


def _fail(message: str, code: int = EXIT_ERROR) -> typer.Exit:
    err.print(f"error: {escape(_one_line(message))}")
    return typer.Exit(code)


def _run(work: Callable[[], Awaitable[T]]) -> T:
    """Run one command's coroutine; every failure becomes one line and an exit code."""

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
        raise _fail(str(exc)) from None
    except RecursionError:
        log.debug("command failed", exc_info=True)
        raise _fail("a value is nested too deeply to process") from None
    except OSError as exc:
        log.debug("command failed", exc_info=True)
        where = f": {exc.filename}" if exc.filename else ""
        raise _fail(f"{exc.strerror or exc}{where}") from None
    except Exception as exc:
        log.debug("command failed", exc_info=True)
        raise _fail(f"{type(exc).__name__}: {exc}") from None


@contextlib.asynccontextmanager
async def _manager(dsn: str) -> AsyncIterator[SessionManager]:
    async with SessionStorage(dsn) as storage:
        yield SessionManager(storage)


def _json(data: Any) -> None:
    typer.echo(strict_json(data))


def _record(record: BaseModel) -> dict[str, Any]:
    """A stored record's fields as they are. Not ``model_dump``: pydantic's serialiser
    refuses values nested deeper than its own limit, which the store accepts."""
    return {name: getattr(record, name) for name in type(record).model_fields}


def _visible(text: object | None, limit: int | None = _PREVIEW, *, one_line: bool = False) -> str:
    """Text safe for a terminal: control characters shown as escapes (with ``one_line``,
    newlines and tabs too), rich markup escaped."""
    if text is None:
        return ""
    shown = _no_controls(str(text), keep_line_breaks=not one_line)
    if limit is not None and len(shown) > limit:
        shown = shown[:limit] + f"… ({len(shown) - limit} more characters)"
    return escape(shown)


def _field(text: object | None) -> str:
    """A short stored value (a key, a status, an id) for one line or one table cell."""
    return _visible(text, 200, one_line=True)


def _when(ms: int | None) -> str:
    """A stored millisecond time as UTC, or the number itself when it is no date (a legacy
    row can hold any integer, or something else)."""
    if ms is None:
        return "-"
    try:
        return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%SZ")
    except (TypeError, ValueError, OverflowError, OSError):
        return _field(ms)


def _preview_json(preview: DeletionPreview) -> dict[str, Any]:
    return {
        "sessions": preview.session_keys,
        "rows": preview.rows,
        "invalidated_context_states": preview.invalidated_context_states,
    }


def _print_preview(action: str, preview: DeletionPreview) -> None:
    out.print(f"dry run: {action} would delete {len(preview.sessions)} session(s)")
    for node in preview.sessions:
        out.print(f"  {_field(node.session_key)}  (updated {_when(node.updated_at)})")
    for table, count in preview.rows.items():
        out.print(f"  {table}: {count} row(s)")
    if preview.invalidated_context_states:
        out.print(f"  context states invalidated: {preview.invalidated_context_states}")
    out.print("nothing was changed")


# -- global options --------------------------------------------------------------------


@app.callback()
def _global(
    ctx: typer.Context,
    dsn: Annotated[
        str | None,
        typer.Option(
            "--dsn",
            help="Database: a SQLite path or URL, or postgresql://... "
            "(default: $OPENSQUILLA_SESSION_DSN, else ~/.opensquilla/sessions.db).",
        ),
    ] = None,
    verbose: Annotated[
        int, typer.Option("--verbose", "-v", count=True, help="Log to stderr (-vv: debug).")
    ] = 0,
) -> None:
    ctx.obj = Options(dsn=dsn)
    if verbose:
        _configure_logging(verbose)
        ctx.call_on_close(_stop_logging)


# -- db --------------------------------------------------------------------------------


@db_app.command("upgrade")
def db_upgrade(
    ctx: typer.Context,
    revision: Annotated[str, typer.Argument(help="Target revision.")] = "head",
) -> None:
    """Upgrade the schema (default: to the newest revision)."""
    before, after = _run(lambda: admin.upgrade(_dsn(ctx), revision))
    if before == after:
        out.print(f"already at {_revisions(after)}")
    else:
        out.print(f"upgraded from {_revisions(before)} to {_revisions(after)}")


def _revisions(revisions: Sequence[str], none: str = "base") -> str:
    """Revision ids as read from a database (``alembic_version`` can hold anything)."""
    return _field(", ".join(revisions)) if revisions else none


@db_app.command("downgrade")
def db_downgrade(
    ctx: typer.Context,
    revision: Annotated[str, typer.Argument(help="Target revision ('base' drops the tables).")],
) -> None:
    """Downgrade the schema to REVISION."""
    before, after = _run(lambda: admin.downgrade(_dsn(ctx), revision))
    out.print(f"downgraded from {_revisions(before)} to {_revisions(after)}")


@db_app.command("current")
def db_current(
    ctx: typer.Context, as_json: Annotated[bool, typer.Option("--json")] = False
) -> None:
    """Show the revision the database is at."""
    current = _run(lambda: admin.current_revisions(_dsn(ctx)))
    if as_json:
        _json({"current": list(current)})
    else:
        out.print(_revisions(current, "none (an empty or unmigrated database)"))


@db_app.command("check")
def db_check(ctx: typer.Context, as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Compare the database with the code; exit 2 if it is behind, ahead or drifted."""
    report = _run(lambda: admin.schema_report(_dsn(ctx)))
    if as_json:
        _json(
            {
                "state": report.state,
                "ok": report.ok,
                "current": list(report.current),
                "heads": list(report.heads),
                "unknown": list(report.unknown),
                "drift": list(report.drift),
            }
        )
    else:
        out.print(f"state: {_field(report.state)}")
        out.print(f"database: {_revisions(report.current, 'none')}")
        out.print(f"code:     {_revisions(report.heads, 'none')}")
        for line in report.drift:
            out.print(f"  drift: {_visible(line, one_line=True)}")
    if not report.ok:
        raise typer.Exit(EXIT_CHECK_FAILED)


@db_app.command("history")
def db_history(as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """List the migration revisions, newest first."""
    revisions = migrate.history()
    if as_json:
        _json({"revisions": [asdict(info) for info in revisions]})
        return
    for info in revisions:
        head = " (head)" if info.is_head else ""
        out.print(
            f"{_field(info.down_revision or 'base')} -> {_field(info.revision)}{head}: "
            f"{_field(info.message)}"
        )


# -- sessions --------------------------------------------------------------------------


@sessions_app.command("list")
def sessions_list(
    ctx: typer.Context,
    agent: Annotated[str | None, typer.Option("--agent", help="Only this agent.")] = None,
    status: Annotated[SessionStatus | None, typer.Option("--status")] = None,
    parent: Annotated[str | None, typer.Option("--parent", help="Children of this key.")] = None,
    limit: Annotated[int, typer.Option("--limit", min=0, max=INT64_MAX)] = 50,
    offset: Annotated[int, typer.Option("--offset", min=0, max=INT64_MAX)] = 0,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """List sessions, most recently updated first."""

    async def work() -> list[Any]:
        async with _manager(_dsn(ctx)) as manager:
            return await manager.storage.list_sessions(
                agent_id=agent,
                status=status.value if status is not None else None,
                limit=limit,
                offset=offset,
                parent_session_key=parent,
            )

    nodes = _run(work)
    if as_json:
        _json(
            {
                "sessions": [_record(node) for node in nodes],
                "limit": limit,
                "offset": offset,
            }
        )
        return
    if not nodes:
        out.print("no sessions")
        return
    table = Table(box=box.SIMPLE_HEAD)
    table.add_column("key", overflow="fold", min_width=24)
    for name in ("status", "agent", "updated", "epoch", "tokens", "model"):
        table.add_column(name, overflow="fold")
    for node in nodes:
        table.add_row(
            _field(node.session_key),
            _field(node.status),
            _field(node.agent_id),
            _when(node.updated_at),
            _field(node.epoch),
            _field(node.total_tokens),
            _field(node.model or "-"),
        )
    out.print(table)


def _entry_lines(entry: TranscriptEntry) -> list[str]:
    """One message as text: tool calls and tool results folded to one line each."""
    head = f"[bold]#{_field(entry.id)} {_field(entry.role)}[/bold] "
    head += f"[dim]{_when(entry.created_at)}[/dim]"
    if entry.role == "tool" or entry.tool_call_id:
        first = (entry.content or "").splitlines()[0] if entry.content else ""
        return [
            f"{head} ↩ {_field(entry.tool_call_id or '-')}: {_visible(first, 100, one_line=True)}"
        ]
    lines = [head]
    if entry.content:
        lines.append(_visible(entry.content))
    for call in entry.tool_calls or []:
        function = call.get("function") if isinstance(call, dict) else None
        name = function.get("name") if isinstance(function, dict) else None
        arguments = function.get("arguments") if isinstance(function, dict) else None
        shown = arguments if isinstance(arguments, str) else strict_json(arguments, None)
        lines.append(
            f"  ↳ {_field(name or 'tool call')}({_visible(shown, 80, one_line=True)}) "
            f"[dim]{_field(call.get('id', '') if isinstance(call, dict) else '')}[/dim]"
        )
    return lines


def _summary_json(summary: SessionSummary) -> dict[str, Any]:
    return _record(summary)


@sessions_app.command("show")
def sessions_show(
    ctx: typer.Context,
    key: Annotated[str, typer.Argument(help="Session key.")],
    canonical: Annotated[
        bool, typer.Option("--canonical", help="Include the compacted archive.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Show a session: its fields, transcript, summaries and context states."""

    async def work() -> dict[str, Any]:
        async with _manager(_dsn(ctx)) as manager:
            node = await manager.get_session(key)
            if node is None:
                raise SessionNotFoundError(f"Session not found: {key}")
            read = manager.get_canonical_transcript if canonical else manager.get_transcript
            return {
                "session": node,
                "transcript": await read(node.session_key),
                "summaries": await manager.get_summaries(node.session_key),
                "states": await manager.get_context_states(node.session_key, valid_only=False),
            }

    found = _run(work)
    node = found["session"]
    if as_json:
        _json(
            {
                "session": _record(node),
                "transcript_view": "canonical" if canonical else "live",
                "transcript": [_record(entry) for entry in found["transcript"]],
                "summaries": [_summary_json(summary) for summary in found["summaries"]],
                "context_states": [_record(state) for state in found["states"]],
            }
        )
        return
    fields = Table.grid(padding=(0, 2))
    for name, value in _record(node).items():
        if value not in (None, "", {}, []):
            shown = value if isinstance(value, str) else strict_json(value, None)
            if name.endswith("_at") and isinstance(value, int) and not isinstance(value, bool):
                shown = f"{value} ({_when(value)})"
            fields.add_row(name, _field(shown))
    out.print(f"[bold]session {_field(node.session_key)}[/bold]")
    out.print(fields)
    view = "canonical transcript" if canonical else "live transcript"
    out.print(f"\n[bold]{view}[/bold] ({len(found['transcript'])} messages)")
    for entry in found["transcript"]:
        for line in _entry_lines(entry):
            out.print(line)
    out.print(f"\n[bold]summaries[/bold] ({len(found['summaries'])})")
    for summary in found["summaries"]:
        out.print(
            f"#{_field(summary.id)} index {_field(summary.compaction_index)} "
            f"{_field(summary.compaction_id)}: "
            f"removed {_field(summary.removed_count)}, kept {_field(summary.kept_count)}, "
            f"coverage {_field(summary.coverage_status)}, "
            f"flush {_field(summary.flush_receipt_status)}, "
            f"through #{_field(summary.covered_through_id)}"
        )
        out.print(_visible(summary.summary_text, 400))
    out.print(f"\n[bold]context states[/bold] ({len(found['states'])})")
    for state in found["states"]:
        validity = "valid" if state.valid else f"invalid ({_field(state.invalid_reason)})"
        out.print(
            f"#{_field(state.id)} {_field(state.provider)}/{_field(state.state_kind)} "
            f"through #{_field(state.covered_through_id)}, {validity}"
        )


# -- operations ------------------------------------------------------------------------


@app.command("compact")
def compact(
    ctx: typer.Context,
    key: Annotated[str, typer.Argument(help="Session key.")],
    window: Annotated[
        int, typer.Option("--window", min=1, max=INT64_MAX, help="Context window in tokens.")
    ],
    strict: Annotated[
        bool, typer.Option("--strict", help="Refuse a summary that misses an obligation.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Fold the oldest part of the live transcript into a summary (rows go to the archive)."""

    async def work() -> Any:
        async with _manager(_dsn(ctx)) as manager:
            config = CompactionConfig(coverage_blocking=strict)
            return await manager.compact_with_result(key, window, config, trigger_reason="operator")

    result = _run(work)
    if as_json:
        _json(
            {
                "removed_count": result.removed_count,
                "kept_count": len(result.kept_entries),
                "tokens_before": result.tokens_before,
                "tokens_after": result.tokens_after,
                "coverage_status": result.coverage_status,
                "missing_obligations": result.missing_obligations or [],
                "skip_reason": result.skip_reason,
                "summary_source": result.summary_source,
                "summary": result.summary,
            }
        )
        return
    if result.skip_reason or not result.removed_count:
        out.print(f"nothing compacted: {_field(result.skip_reason or 'nothing to remove')}")
        return
    out.print(
        f"compacted: {_field(result.removed_count)} message(s) archived, "
        f"{len(result.kept_entries)} kept; "
        f"tokens {_field(result.tokens_before)} -> {_field(result.tokens_after)}"
    )
    out.print(f"coverage: {_field(result.coverage_status)}")
    for missing in result.missing_obligations or []:
        out.print(f"  missing: {_field(missing)}")
    out.print(_visible(result.summary))


@app.command("reset")
def reset(
    ctx: typer.Context,
    key: Annotated[str, typer.Argument(help="Session key.")],
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only report what would go.")] = False,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Start a new generation of KEY; the old one is archived to a file, then deleted."""

    async def work() -> Any:
        async with _manager(_dsn(ctx)) as manager:
            if dry_run:
                return await manager.preview_reset(key)
            return await manager.reset_with_report(key)

    result = _run(work)
    if isinstance(result, DeletionPreview):
        if as_json:
            _json({"dry_run": True, **_preview_json(result)})
        else:
            _print_preview("reset", result)
        return
    path = str(result.archive_path) if result.archive_path else None
    if as_json:
        _json(
            {
                "session_key": result.session.session_key,
                "previous_session_id": result.previous_session_id,
                "session_id": result.session.session_id,
                "epoch": result.session.epoch,
                "archive_path": path,
            }
        )
        return
    out.print(
        f"reset {_field(result.session.session_key)}: generation "
        f"{_field(result.previous_session_id)} -> {_field(result.session.session_id)} "
        f"(epoch {_field(result.session.epoch)})"
    )
    out.print(
        f"archive: {_visible(path, None, one_line=True) if path else 'none (nothing to archive)'}"
    )


@app.command("branch")
def branch(
    ctx: typer.Context,
    parent: Annotated[str, typer.Argument(help="Parent session key.")],
    child: Annotated[str, typer.Argument(help="New session key.")],
    before: Annotated[
        str | None, typer.Option("--before", help="Copy only the messages before this id.")
    ] = None,
    no_transcript: Annotated[
        bool, typer.Option("--no-transcript", help="Start the child empty.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Create CHILD from PARENT (by default with a copy of its transcript)."""

    async def work() -> tuple[Any, int]:
        async with _manager(_dsn(ctx)) as manager:
            node = await manager.branch(
                parent,
                child,
                fork_transcript=not no_transcript,
                fork_before_message_id=before,
            )
            return node, len(await manager.get_transcript(node.session_key))

    node, messages = _run(work)
    if as_json:
        _json({"session": _record(node), "messages": messages})
        return
    out.print(
        f"created {_field(node.session_key)} from {_field(node.parent_session_key)} "
        f"with {messages} message(s)"
    )


@app.command("truncate")
def truncate(
    ctx: typer.Context,
    key: Annotated[str, typer.Argument(help="Session key.")],
    keep: Annotated[
        int, typer.Argument(min=0, max=INT64_MAX, help="Live messages to keep (the newest).")
    ],
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only report what would go.")] = False,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Keep the newest N live messages of KEY; older ones and the archive are deleted."""

    async def work() -> Any:
        async with _manager(_dsn(ctx)) as manager:
            if dry_run:
                return await manager.preview_truncate(key, keep)
            return await manager.truncate(key, keep)

    result = _run(work)
    if isinstance(result, DeletionPreview):
        if as_json:
            _json({"dry_run": True, **_preview_json(result)})
        else:
            _print_preview("truncate", result)
        return
    if as_json:
        _json(result)
    elif result["truncated"]:
        out.print(
            f"truncated: {_field(result['before_count'])} -> {_field(result['after_count'])} "
            "live messages"
        )
    else:
        out.print(f"nothing to truncate ({_field(result['before_count'])} live messages)")


@app.command("prune")
def prune(
    ctx: typer.Context,
    older_than: Annotated[
        str, typer.Option("--older-than", help="Age of the last update: 30d, 12h, 90m, 45s.")
    ],
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only report what would go.")] = False,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Delete sessions not updated for a while, with everything they hold."""

    async def work() -> Any:
        max_age = admin.parse_duration(older_than)
        if max_age > INT64_MAX:
            raise InvalidInputError(
                f"--older-than {older_than.strip()} is out of range: at most "
                f"{INT64_MAX // _DAY_MS}d (the longest age, in milliseconds, the store can "
                "compare)"
            )
        async with _manager(_dsn(ctx)) as manager:
            if dry_run:
                return await manager.preview_prune_stale(max_age)
            return await manager.prune_stale(max_age)

    _report_retention("prune", _run(work), as_json)


@app.command("cap")
def cap(
    ctx: typer.Context,
    max_sessions: Annotated[
        int, typer.Option("--max", min=0, max=INT64_MAX, help="Sessions to keep.")
    ],
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only report what would go.")] = False,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Keep at most --max sessions, deleting the least recently updated."""

    async def work() -> Any:
        async with _manager(_dsn(ctx)) as manager:
            if dry_run:
                return await manager.preview_cap_entries(max_sessions)
            return await manager.cap_entries(max_sessions)

    _report_retention("cap", _run(work), as_json)


def _report_retention(action: str, result: DeletionPreview | int, as_json: bool) -> None:
    if isinstance(result, DeletionPreview):
        if as_json:
            _json({"dry_run": True, **_preview_json(result)})
        else:
            _print_preview(action, result)
    elif as_json:
        _json({"dry_run": False, "deleted_sessions": result})
    else:
        out.print(f"{action}: deleted {result} session(s)")


# -- repair queue ----------------------------------------------------------------------


@repair_app.command("list")
def repair_list(
    ctx: typer.Context,
    agent: Annotated[str | None, typer.Option("--agent")] = None,
    limit: Annotated[int, typer.Option("--limit", min=0, max=INT64_MAX)] = 50,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Compactions whose memory flush was degraded or must be retried."""

    async def work() -> tuple[list[SessionSummary], admin.ArchiveReport]:
        async with _manager(_dsn(ctx)) as manager:
            summaries = await manager.list_degraded_compactions(agent_id=agent, limit=limit)
            return summaries, await admin.archive_report(manager.storage)

    summaries, archives = _run(work)
    if as_json:
        _json(
            {
                "summaries": [_summary_json(summary) for summary in summaries],
                "reset_archives": archives.as_json(),
            }
        )
        return
    _print_archives(archives)
    if not summaries:
        out.print("the repair queue is empty")
        return
    table = Table(box=box.SIMPLE_HEAD)
    for name in ("id", "session", "compaction", "status", "removed", "created"):
        table.add_column(name, overflow="fold")
    for summary in summaries:
        table.add_row(
            _field(summary.id),
            _field(summary.session_key),
            _field(summary.compaction_id or "-"),
            _field(summary.flush_receipt_status),
            _field(summary.removed_count),
            _when(summary.created_at),
        )
    out.print(table)


def _print_archives(report: admin.ArchiveReport) -> None:
    """Reset archives a crash left behind: settled at this start, or still unpublished."""
    for item in report.recovered:
        out.print(
            f"reset archive {item.outcome} at start: {_visible(str(item.path), None)} "
            f"({_visible(item.session_key)}: {_visible(item.reason)})"
        )
    for staged in report.unpublished:
        out.print(
            f"unpublished reset archive: {_visible(str(staged.path), None)} "
            f"({staged.size} bytes; would be {_visible(staged.final.name, None)})"
        )


async def _summary(manager: SessionManager, summary_id: int) -> SessionSummary:
    summary = await manager.storage.get_summary(summary_id)
    if summary is None:
        raise SessionNotFoundError(f"no compaction summary with id {summary_id}")
    return summary


@repair_app.command("show")
def repair_show(
    ctx: typer.Context,
    summary_id: Annotated[
        int, typer.Argument(min=0, max=INT64_MAX, help="Summary id (from 'repair list').")
    ],
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """A queued compaction: its summary and the messages it folded away."""

    async def work() -> tuple[SessionSummary, list[TranscriptEntry]]:
        async with _manager(_dsn(ctx)) as manager:
            summary = await _summary(manager, summary_id)
            return summary, await manager.get_compaction_preimage(summary)

    summary, preimage = _run(work)
    if as_json:
        _json(
            {
                "summary": _summary_json(summary),
                "preimage": [_record(entry) for entry in preimage],
            }
        )
        return
    out.print(
        f"[bold]summary #{_field(summary.id)}[/bold] of {_field(summary.session_key)} "
        f"({_field(summary.compaction_id)}), flush {_field(summary.flush_receipt_status)}"
    )
    out.print(_visible(summary.summary_text))
    out.print(f"\n[bold]preimage[/bold] ({len(preimage)} messages)")
    for entry in preimage:
        for line in _entry_lines(entry):
            out.print(line)


@repair_app.command("mark")
def repair_mark(
    ctx: typer.Context,
    summary_id: Annotated[
        int, typer.Argument(min=0, max=INT64_MAX, help="Summary id (from 'repair list').")
    ],
    status: Annotated[FlushReceiptStatus, typer.Argument(help="The new flush receipt status.")],
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Record the outcome of a repair (e.g. 'safe' once the memory flush was redone)."""

    async def work() -> SessionSummary:
        async with _manager(_dsn(ctx)) as manager:
            summary = await _summary(manager, summary_id)
            await manager.mark_compaction_repair_status(summary, status.value)
            return summary

    summary = _run(work)
    if as_json:
        _json({"summary": _summary_json(summary)})
    else:
        out.print(
            f"summary #{_field(summary.id)}: flush receipt status is now "
            f"{_field(summary.flush_receipt_status)}"
        )


# -- moving data -----------------------------------------------------------------------


@app.command("export")
def export(
    ctx: typer.Context,
    session: Annotated[
        list[str] | None, typer.Option("--session", help="Only this session (repeatable).")
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            help="File to write (default, or '-': stdout). A FIFO or a device is written "
            "through; the store's own files and other databases are refused.",
        ),
    ] = None,
) -> None:
    """Export sessions (all, or --session KEY) in the JSONL export format."""
    to_file = output is not None and str(output) != "-"

    async def work() -> transfer.ExportSummary:
        async with SessionStorage(_dsn(ctx)) as storage:
            if output is not None and to_file:
                return await transfer.export_to_file(storage, output, session_keys=session)
            stream = sys.stdout.buffer
            summary = await transfer.export_sessions(storage, stream, session_keys=session)
            stream.flush()
            return summary

    summary = _run(work)
    err.print(
        f"exported {summary.sessions} session(s), "
        f"{sum(summary.rows.values()) - summary.sessions} row(s)"
        + (f" to {_visible(output, None, one_line=True)}" if to_file else "")
    )


@app.command("import")
def import_(
    ctx: typer.Context,
    file: Annotated[Path, typer.Argument(help="An export file.")],
    skip_existing: Annotated[
        bool,
        typer.Option(
            "--skip-existing", help="Leave sessions whose key exists (default: refuse the file)."
        ),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Import an export file; each session in one transaction, ids kept.

    Everything is checked before anything is written (format, every value, ids and session
    ids against the target). Sessions an earlier run imported are recognised and left as
    they are, so running the same import again finishes an interrupted one.
    """

    async def work() -> transfer.ImportSummary:
        async with SessionStorage(_dsn(ctx)) as storage:
            return await transfer.import_sessions(
                storage, file, if_exists="skip" if skip_existing else "fail"
            )

    summary = _run(work)
    if as_json:
        _json(
            {
                "imported": summary.imported,
                "unchanged": summary.unchanged,
                "skipped": summary.skipped,
                "rows": summary.rows,
            }
        )
        return
    out.print(
        f"imported {len(summary.imported)} session(s)"
        + (
            f"; {len(summary.unchanged)} already imported (identical), left as they are"
            if summary.unchanged
            else ""
        )
    )
    for key in summary.skipped:
        out.print(f"  skipped (already there with other contents): {_field(key)}")


@app.command("copy")
def copy(
    source: Annotated[str, typer.Option("--from", help="Source database (DSN or path).")],
    target: Annotated[str, typer.Option("--to", help="Target database (DSN or path).")],
    batch_size: Annotated[
        int,
        typer.Option(
            "--batch-size", min=1, max=MAX_BATCH, help="Sessions read per source snapshot."
        ),
    ] = transfer.DEFAULT_BATCH,
    jobs: Annotated[
        int,
        typer.Option(
            "--jobs",
            min=1,
            max=MAX_JOBS,
            help="Sessions written at once (one transaction each).",
        ),
    ] = transfer.DEFAULT_JOBS,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Copy every session from one database to another, then verify the copy.

    Re-running is safe: sessions already copied identically are skipped. A session the
    target cannot take is named with the reason, and the others are copied (exit 2).
    """

    async def work() -> transfer.CopyReport:
        source_dsn = resolve_dsn(source, given_as="--from")
        target_dsn = resolve_dsn(target, given_as="--to")
        async with SessionStorage(source_dsn) as src, SessionStorage(target_dsn) as dst:
            err.print(f"copying {_visible(src.target.render())} -> {_visible(dst.target.render())}")
            with Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=err,
                disable=as_json,
            ) as progress:
                task = progress.add_task("sessions", total=None)

                def advance(event: transfer.CopyProgress) -> None:
                    progress.update(task, total=event.total, completed=event.done)

                return await transfer.copy_sessions(
                    src, dst, batch_size=batch_size, jobs=jobs, on_progress=advance
                )

    report = _run(work)
    if as_json:
        _json(
            {
                "ok": report.ok,
                "total": report.total,
                "copied": report.copied,
                "skipped": report.skipped,
                "conflicts": report.conflicts,
                "refused": report.refused,
                "rows": report.rows,
                "verification": [{**asdict(check), "ok": check.ok} for check in report.checks],
            }
        )
    else:
        out.print(
            f"{report.total} session(s): {report.copied} copied, {report.skipped} already there"
            + (f", {len(report.conflicts)} conflicting" if report.conflicts else "")
            + (f", {len(report.refused)} not copied" if report.refused else "")
        )
        for key in report.conflicts:
            out.print(f"  conflict (exists in the target with other contents): {_field(key)}")
        for key, reason in report.refused.items():
            out.print(f"  not copied: {_field(key)}: {_visible(reason, 500, one_line=True)}")
        if report.checks:
            table = Table("table", "source rows", "target rows", "checksum", box=box.SIMPLE_HEAD)
            for check in report.checks:
                table.add_row(
                    check.table,
                    str(check.source_rows),
                    str(check.target_rows),
                    "match" if check.ok else "DIFFERENT",
                )
            out.print(table)
            out.print("verified: identical" if report.verified else "verification FAILED")
    if not report.ok:
        raise typer.Exit(EXIT_CHECK_FAILED)


# -- overview and demo -----------------------------------------------------------------


@app.command("stats")
def stats(ctx: typer.Context, as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Counts: sessions, entries, archive, summaries by flush status, the repair queue."""

    async def work() -> admin.StoreStats:
        async with SessionStorage(_dsn(ctx)) as storage:
            return await admin.collect_stats(storage)

    result = _run(work)
    counts = result.counts
    data = {
        "sessions": counts.sessions,
        "entries": {"live": counts.live_entries, "archived": counts.archived_entries},
        "archive": {
            "entries": counts.archived_entries,
            "content_chars": counts.archived_content_chars,
        },
        "summaries_by_flush_status": counts.summaries_by_flush_status,
        "degraded_queue": counts.degraded_queue,
        "context_states": {"total": counts.context_states, "valid": counts.valid_context_states},
        "reset_archives": {
            "directory": str(result.reset_archive_directory),
            "files": result.reset_archive_files,
            "bytes": result.reset_archive_bytes,
            **result.archives.as_json(),
        },
    }
    if as_json:
        _json(data)
        return
    out.print(f"sessions:          {counts.sessions}")
    out.print(f"entries:           {counts.live_entries} live, {counts.archived_entries} archived")
    out.print(f"archive size:      {counts.archived_content_chars} characters of content")
    statuses = ", ".join(f"{_field(k)}={v}" for k, v in counts.summaries_by_flush_status.items())
    out.print(f"summaries:         {sum(counts.summaries_by_flush_status.values())} ({statuses})")
    out.print(f"repair queue:      {counts.degraded_queue}")
    out.print(f"context states:    {counts.context_states} ({counts.valid_context_states} valid)")
    out.print(
        f"reset archives:    {result.reset_archive_files} file(s), "
        f"{result.reset_archive_bytes} bytes in "
        f"{_visible(result.reset_archive_directory, None, one_line=True)}"
    )
    _print_archives(result.archives)


@app.command("demo")
def demo(ctx: typer.Context, as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Play a scripted agent conversation on the database (the embedded default if unset)."""

    async def work() -> Any:
        async with _manager(_dsn(ctx)) as manager:
            return await run_demo(manager), manager.storage.target.render()

    report, where = _run(work)
    if as_json:
        _json(
            {
                "database": where,
                "session_key": report.session_key,
                "branch_key": report.branch_key,
                "steps": [{"step": step.title, **step.data} for step in report.steps],
            }
        )
        return
    out.print(f"[bold]opensquilla-session demo[/bold] on {_visible(where, None, one_line=True)}")
    for step in report.steps:
        out.rule(step.title)
        for line in step.lines:
            out.print(_visible(line, None))
    out.print(
        "\ninspect the branch (it kept the conversation): "
        f"opensquilla-session sessions show {_field(report.branch_key)} --canonical"
    )


def main() -> None:
    app()


if __name__ == "__main__":
    main()
