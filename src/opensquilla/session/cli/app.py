"""The typer application: the global options and every command, in the order ``--help``
lists them. The commands themselves live in one module per group; this module only wires
them (so the whole command tree can be read here)."""

from __future__ import annotations

import typer

from . import db, demo, operations, repair, search, sessions, stats, transfer
from .options import Dsn, Verbose
from .runtime import Options, configure_logging, stop_logging

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


# No docstring: typer would show it as the application's help.
@app.callback()
def _global(ctx: typer.Context, dsn: Dsn = None, verbose: Verbose = 0) -> None:
    ctx.obj = Options(dsn=dsn)
    if verbose:
        configure_logging(verbose)
        ctx.call_on_close(stop_logging)


db_app.command("upgrade")(db.db_upgrade)
db_app.command("downgrade")(db.db_downgrade)
db_app.command("current")(db.db_current)
db_app.command("check")(db.db_check)
db_app.command("history")(db.db_history)

sessions_app.command("list")(sessions.sessions_list)
sessions_app.command("show")(sessions.sessions_show)
app.command("search")(search.search)

app.command("compact")(operations.compact)
app.command("reset")(operations.reset)
app.command("branch")(operations.branch)
app.command("truncate")(operations.truncate)
app.command("prune")(operations.prune)
app.command("cap")(operations.cap)

repair_app.command("list")(repair.repair_list)
repair_app.command("show")(repair.repair_show)
repair_app.command("mark")(repair.repair_mark)

app.command("export")(transfer.export)
app.command("import")(transfer.import_)
app.command("copy")(transfer.copy)

app.command("stats")(stats.stats)
app.command("demo")(demo.demo)


def main() -> None:
    """The ``opensquilla-session`` console script and ``python -m opensquilla.session``."""
    app()
