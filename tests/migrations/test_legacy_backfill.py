"""Legacy continuity (issue 11, class 16): adopting a database older than the cost-source
columns back-fills them exactly as the older store's own migration did (its yoyo
``V007__session_cost_source_rollup``): a session holding only ``estimated_cost_usd = 0.42``
reads back with total 0.42, estimated component 0.42, source ``opensquilla_estimate``;
sessions without a cost keep 0.0 and ``none``. Only columns adoption itself adds are
back-filled: rows of a table that already had them are never touched."""

from __future__ import annotations

import pytest

from opensquilla.session import SessionStorage

from ..cli.support import cli, run
from .raw import fetch, run_sql
from .test_legacy_adoption import _Backend

# The older store's ``sessions`` before V007 (its test builds it from its current DDL minus
# the five cost columns, ``schema_version`` and ``epoch``); the columns that matter here.
PRE_V007_SESSIONS = """
CREATE TABLE sessions (
    session_key TEXT PRIMARY KEY,
    session_id TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    input_tokens INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0,
    total_tokens INTEGER NOT NULL DEFAULT 0,
    estimated_cost_usd {real} NOT NULL DEFAULT 0.0,
    status TEXT NOT NULL DEFAULT 'running'
)
"""
PRE_V007_ROWS = [
    "INSERT INTO sessions (session_key, session_id, created_at, updated_at, total_tokens, "
    "estimated_cost_usd) VALUES ('agent:main:costly', 'sid-costly', 1751234567000, "
    "1751234567000, 1200, 0.42)",
    "INSERT INTO sessions (session_key, session_id, created_at, updated_at) "
    "VALUES ('agent:main:free', 'sid-free', 1751234567000, 1751234567000)",
]


def _real(backend: _Backend) -> str:
    # A native Postgres port declares a double, as SQLite's REAL is.
    return "DOUBLE PRECISION" if backend.is_postgres else "REAL"


async def _assert_backfilled(target: str) -> None:
    async with SessionStorage(target) as storage:
        costly = await storage.get_session("agent:main:costly")
        assert costly is not None
        assert costly.estimated_cost_usd == 0.42
        assert costly.total_cost_usd == 0.42
        assert costly.estimated_cost_component_usd == 0.42
        assert costly.cost_source == "opensquilla_estimate"
        assert costly.billed_cost_usd == 0.0
        assert costly.missing_cost_entries == 0
        assert costly.total_tokens == 1200

        free = await storage.get_session("agent:main:free")
        assert free is not None
        assert (free.total_cost_usd, free.estimated_cost_component_usd) == (0.0, 0.0)
        assert free.cost_source == "none"


async def test_connect_backfills_cost_source_columns_of_a_pre_v007_database(
    backend: _Backend, empty_database: str
) -> None:
    await run_sql(
        backend,
        empty_database,
        [PRE_V007_SESSIONS.format(real=_real(backend)), *PRE_V007_ROWS],
    )
    await _assert_backfilled(empty_database)


def test_db_upgrade_backfills_cost_source_columns_of_a_pre_v007_database(
    backend: _Backend, empty_database: str
) -> None:
    run(
        run_sql(
            backend,
            empty_database,
            [PRE_V007_SESSIONS.format(real=_real(backend)), *PRE_V007_ROWS],
        )
    )
    upgraded = cli(empty_database, "db", "upgrade")
    assert upgraded.exit_code == 0, upgraded.output
    run(_assert_backfilled(empty_database))


async def test_a_row_holding_only_an_estimated_cost_reads_back_as_its_total(
    backend: _Backend, empty_database: str
) -> None:
    """The older store's own test case: ``sessions(session_key, estimated_cost_usd)``."""
    await run_sql(
        backend,
        empty_database,
        [
            "CREATE TABLE sessions (session_key TEXT PRIMARY KEY, "
            f"estimated_cost_usd {_real(backend)} NOT NULL DEFAULT 0.0)",
            "INSERT INTO sessions VALUES ('agent:main:legacy', 0.42)",
        ],
    )
    async with SessionStorage(empty_database) as storage:
        node = await storage.get_session("agent:main:legacy")
        assert node is not None
        assert (
            node.total_cost_usd,
            node.billed_cost_usd,
            node.estimated_cost_component_usd,
            node.cost_source,
            node.missing_cost_entries,
        ) == (0.42, 0.0, 0.42, "opensquilla_estimate", 0)


async def test_rows_of_a_table_that_already_had_the_cost_columns_are_not_touched(
    backend: _Backend, empty_database: str
) -> None:
    """A table past V007 keeps its values as written, even a row the back-fill's own
    condition would match (its writer chose total 0.0 and ``none``)."""
    await run_sql(
        backend,
        empty_database,
        [
            PRE_V007_SESSIONS.format(real=_real(backend)).replace(
                "status TEXT",
                f"total_cost_usd {_real(backend)} NOT NULL DEFAULT 0.0, "
                f"billed_cost_usd {_real(backend)} NOT NULL DEFAULT 0.0, "
                f"estimated_cost_component_usd {_real(backend)} NOT NULL DEFAULT 0.0, "
                "cost_source TEXT NOT NULL DEFAULT 'none', "
                "missing_cost_entries INTEGER NOT NULL DEFAULT 0, status TEXT",
            ),
            *PRE_V007_ROWS,
        ],
    )
    async with SessionStorage(empty_database) as storage:
        costly = await storage.get_session("agent:main:costly")
        assert costly is not None
        assert costly.estimated_cost_usd == 0.42
        assert (costly.total_cost_usd, costly.estimated_cost_component_usd) == (0.0, 0.0)
        assert costly.cost_source == "none"


@pytest.mark.parametrize("epoch", ["INTEGER", "BIGINT"])
async def test_null_epochs_of_a_legacy_table_read_back_as_zero(
    backend: _Backend, empty_database: str, epoch: str
) -> None:
    """The older store's epoch migration set NULL epochs (left by a partial migration) to
    0; adoption does the same."""
    await run_sql(
        backend,
        empty_database,
        [
            "CREATE TABLE sessions (session_key TEXT PRIMARY KEY, session_id TEXT NOT NULL, "
            f"created_at BIGINT NOT NULL, updated_at BIGINT NOT NULL, epoch {epoch})",
            "INSERT INTO sessions VALUES ('agent:main:nulled', 'sid-n', 1, 2, NULL)",
            "INSERT INTO sessions VALUES ('agent:main:fenced', 'sid-f', 1, 2, 3)",
        ],
    )
    async with SessionStorage(empty_database) as storage:
        assert await storage.get_epoch("agent:main:nulled") == 0
        assert await storage.get_epoch("agent:main:fenced") == 3
    assert sorted(await fetch(backend, empty_database, "SELECT epoch FROM sessions")) == [
        (0,),
        (3,),
    ]
