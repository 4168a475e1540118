"""``export``, ``import``, ``copy``: moving sessions between databases and files."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from .. import transfer
from ..config import resolve_dsn
from ..storage import SessionStorage
from .options import MAX_BATCH, MAX_JOBS, Json
from .render.transfer import COPIED, IMPORTED, copy_progress, print_copying, print_exported
from .runtime import EXIT_CHECK_FAILED, dsn, run


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
    destination = output if output is not None and str(output) != "-" else None
    summary = run(lambda: _export(dsn(ctx), destination, session))
    print_exported(summary, destination)


def import_(
    ctx: typer.Context,
    file: Annotated[Path, typer.Argument(help="An export file.")],
    skip_existing: Annotated[
        bool,
        typer.Option(
            "--skip-existing", help="Leave sessions whose key exists (default: refuse the file)."
        ),
    ] = False,
    as_json: Json = False,
) -> None:
    """Import an export file; each session in one transaction, ids kept.

    Everything is checked before anything is written (format, every value, ids and session
    ids against the target). Sessions an earlier run imported are recognised and left as
    they are, so running the same import again finishes an interrupted one.
    """
    IMPORTED.show(run(lambda: _import(dsn(ctx), file, skip_existing)), as_json)


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
    as_json: Json = False,
) -> None:
    """Copy every session from one database to another, then verify the copy.

    Re-running is safe: sessions already copied identically are skipped. A session the
    target cannot take is named with the reason, and the others are copied (exit 2).
    """

    async def work() -> transfer.CopyReport:
        source_dsn = resolve_dsn(source, given_as="--from")
        target_dsn = resolve_dsn(target, given_as="--to")
        return await _copy(source_dsn, target_dsn, batch_size, jobs, quiet=as_json)

    report = run(work)
    COPIED.show(report, as_json)
    if not report.ok:
        raise typer.Exit(EXIT_CHECK_FAILED)


# -- calls into the library: one per command -------------------------------------------


async def _export(
    dsn: str, destination: Path | None, session_keys: list[str] | None
) -> transfer.ExportSummary:
    """To ``destination``, or to stdout (as bytes: the format is UTF-8 JSON lines)."""
    async with SessionStorage(dsn, create=False) as storage:
        if destination is not None:
            return await transfer.export_to_file(storage, destination, session_keys=session_keys)
        stream = sys.stdout.buffer
        summary = await transfer.export_sessions(storage, stream, session_keys=session_keys)
        stream.flush()
        return summary


async def _import(dsn: str, file: Path, skip_existing: bool) -> transfer.ImportSummary:
    async with SessionStorage(dsn) as storage:
        return await transfer.import_sessions(
            storage, file, if_exists="skip" if skip_existing else "fail"
        )


async def _copy(
    source_dsn: str, target_dsn: str, batch_size: int, jobs: int, *, quiet: bool
) -> transfer.CopyReport:
    """Copy with a progress bar on stderr (``quiet``: none, for ``--json``)."""
    async with (
        SessionStorage(source_dsn, create=False) as src,
        SessionStorage(target_dsn) as dst,
    ):
        print_copying(src.target.render(), dst.target.render())
        with copy_progress(hidden=quiet) as advance:
            return await transfer.copy_sessions(
                src,
                dst,
                batch_size=batch_size,
                jobs=jobs,
                on_progress=lambda event: advance(event.total, event.done),
            )
