"""The rolling-deploy policy (docs/migrations.md#rolling-deploys).

A revision may declare ``expand_only = True``: it only adds what older code ignores. As such
a revision is applied, :func:`record_revision_policy` (Alembic's ``on_version_apply`` hook)
records it in ``session_schema_revisions``; a package that finds the database at a revision
it does not know asks :func:`accept_newer_schema`, which reads that record: every revision
between the database and the package's head expand-only, or a ``MigrationError`` naming the
one that is not.
"""

from __future__ import annotations

import logging
from typing import Any

import sqlalchemy as sa
from alembic.runtime.migration import MigrationContext
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from ..errors import MigrationError
from .errors import translated_errors

log = logging.getLogger("opensquilla.session.migrate")

POLICY_TABLE = "session_schema_revisions"
_policy = sa.table(
    POLICY_TABLE,
    sa.column("revision", sa.Text()),
    sa.column("down_revision", sa.Text()),
    sa.column("expand_only", sa.Boolean()),
)


def record_revision_policy(ctx: MigrationContext, step: Any, **_: Any) -> None:
    """Alembic ``on_version_apply`` hook: keep ``session_schema_revisions`` in step with the
    revisions that declare ``expand_only``. An upgrade records the revision (creating the
    table with the first one); a downgrade forgets it (dropping the table with the last one
    when online). Offline scripts write the same statements."""
    if step.is_stamp:
        return
    script = step.up_revision
    expand_only = getattr(getattr(script, "module", None), "expand_only", None)
    if script is None or expand_only is None:
        return
    forget = sa.delete(_policy).where(_policy.c.revision == script.revision)
    if step.is_upgrade:
        ctx.impl.execute(
            sa.text(
                f"CREATE TABLE IF NOT EXISTS {POLICY_TABLE} (revision VARCHAR(64) PRIMARY KEY, "
                "down_revision VARCHAR(64), expand_only BOOLEAN NOT NULL)"
            )
        )
        ctx.impl.execute(forget)
        down = script.down_revision
        ctx.impl.execute(
            sa.insert(_policy).values(
                revision=script.revision,
                down_revision=down if isinstance(down, str) else None,
                expand_only=bool(expand_only),
            )
        )
        return
    connection = ctx.connection
    if ctx.as_sql or connection is None:
        ctx.impl.execute(forget)
    elif sa.inspect(connection).has_table(POLICY_TABLE):
        connection.execute(forget)
        if connection.scalar(sa.select(sa.func.count()).select_from(_policy)) == 0:
            connection.execute(sa.text(f"DROP TABLE {POLICY_TABLE}"))


def _newer_revisions_sync(connection: Connection) -> dict[str, tuple[str | None, bool]] | None:
    if not sa.inspect(connection).has_table(POLICY_TABLE):
        return None
    rows = connection.execute(
        sa.select(_policy.c.revision, _policy.c.down_revision, _policy.c.expand_only)
    )
    return {revision: (down, bool(expand)) for revision, down, expand in rows}


async def accept_newer_schema(engine: AsyncEngine, unknown: list[str], heads: set[str]) -> None:
    """Run against a database migrated by a newer release when every revision between it
    and our head is recorded as expand-only; else refuse, naming the reason."""
    async with translated_errors(), engine.connect() as conn:
        recorded = await conn.run_sync(_newer_revisions_sync)
    at = ", ".join(unknown)
    base = (
        f"the database is at revision {at}, newer than this version of opensquilla-session "
        f"(its newest revision is {', '.join(sorted(heads))})"
    )
    for revision in unknown:
        walked = revision
        while walked not in heads:
            entry = (recorded or {}).get(walked)
            if entry is None:
                raise MigrationError(
                    f"{base}, and revision {walked} is not recorded as expand-only; "
                    "upgrade the package (a release older than the schema may run against it "
                    "only when every newer revision is expand-only, "
                    "docs/migrations.md#rolling-deploys)"
                )
            down, expand_only = entry
            if not expand_only:
                raise MigrationError(
                    f"{base}, and revision {walked} is not expand-only (it changes what this "
                    "version reads or writes); upgrade the package"
                )
            if down is None:
                raise MigrationError(f"{base}, which does not descend from it; upgrade the package")
            walked = down
    log.warning(
        "%s; every revision in between is expand-only, so this version runs against it "
        "unchanged (upgrade the package to use what they add)",
        base,
        extra={"operation": "migrate"},
    )
