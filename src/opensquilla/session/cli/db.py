"""``db upgrade|downgrade|current|check|history``: the schema migrations (Alembic)."""

from __future__ import annotations

from typing import Annotated

import typer

from ..usecases import overview
from .options import Json
from .render import db as render
from .render.text import out
from .runtime import EXIT_CHECK_FAILED, dsn, run

Revisions = tuple[tuple[str, ...], tuple[str, ...]]  # (before, after)


def db_upgrade(
    ctx: typer.Context,
    revision: Annotated[str, typer.Argument(help="Target revision.")] = "head",
    layout: Annotated[
        str | None,
        typer.Option(
            "--layout",
            help="The tables' layout, chosen when they are created (an EMPTY database): "
            "'plain', or 'partitioned[:N]' (PostgreSQL: hash-partitioned by session_key "
            "into N partitions, default 16; docs/scaling.md).",
        ),
    ] = None,
) -> None:
    """Upgrade the schema (default: to the newest revision)."""
    before, after = run(lambda: _upgrade(dsn(ctx), revision, layout))
    if before == after:
        out.print(f"already at {render.revisions(after)}")
    else:
        out.print(f"upgraded from {render.revisions(before)} to {render.revisions(after)}")


def db_downgrade(
    ctx: typer.Context,
    revision: Annotated[str, typer.Argument(help="Target revision ('base' drops the tables).")],
) -> None:
    """Downgrade the schema to REVISION."""
    before, after = run(lambda: _downgrade(dsn(ctx), revision))
    out.print(f"downgraded from {render.revisions(before)} to {render.revisions(after)}")


def db_current(ctx: typer.Context, as_json: Json = False) -> None:
    """Show the revision the database is at."""
    render.CURRENT.show(run(lambda: _current(dsn(ctx))), as_json)


def db_check(
    ctx: typer.Context,
    as_json: Json = False,
    repair: Annotated[
        bool,
        typer.Option(
            "--repair",
            help="First create the indexes of the current schema the database lacks or "
            "holds invalid (PostgreSQL: CONCURRENTLY; refused unless at head).",
        ),
    ] = False,
) -> None:
    """Compare the database with the code; exit 2 if it is behind, ahead or drifted."""
    repaired = run(lambda: _repair(dsn(ctx))) if repair else None
    report = run(lambda: _check(dsn(ctx)))
    if repaired is None:
        render.SCHEMA.show(report, as_json)
    else:
        render.REPAIRED_SCHEMA.show((repaired, report), as_json)
    if not report.ok:
        raise typer.Exit(EXIT_CHECK_FAILED)


def db_history(as_json: Json = False) -> None:
    """List the migration revisions, newest first."""
    render.HISTORY.show(overview.revision_history(), as_json)


# -- calls into the library: one per command -------------------------------------------


async def _upgrade(dsn: str, revision: str, layout: str | None) -> Revisions:
    return await overview.upgrade(dsn, revision, layout)


async def _downgrade(dsn: str, revision: str) -> Revisions:
    return await overview.downgrade(dsn, revision)


async def _current(dsn: str) -> tuple[str, ...]:
    return await overview.current_revisions(dsn)


async def _repair(dsn: str) -> tuple[str, ...]:
    return await overview.repair_indexes(dsn)


async def _check(dsn: str) -> overview.SchemaReport:
    return await overview.schema_report(dsn)
