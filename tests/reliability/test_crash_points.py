"""A crash at every write statement of every multi-row operation changes nothing.

For each operation, a successful run on a clone of a populated store counts its write
statements (INSERT, UPDATE, DELETE; the compaction lease's aside). Then, for every k of that
count, a fresh clone of the same store runs the operation with the k-th write raising an
exception of the test's own:
the caller gets exactly that exception, every table is exactly as before, no reset
archive (not even a temporary file, nor a ``session_archives`` row when the store keeps its
archives in the database) is left, and the store then runs the operation fine.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from opensquilla.session import SessionManager, SessionStorage
from tests.helpers import table_snapshot

from .scenarios import OPERATIONS, Template, Templates, is_session_write, listening

# Not marked ``durable``: the crash is an exception raised inside the running process, and
# what is checked is the rollback and what the same process then reads, which the server (or
# SQLite's page cache) holds whether or not a commit waited for the disk. The databases are
# the pooled, non-durable ones; the writer killed with SIGKILL (test_kill.py) stays durable.

CRASHED = (
    "reset",
    "branch_full",
    "branch_prefix",
    "truncate",
    "compact",
    "persist",
    "cap",
    "prune",
)


class InjectedCrash(Exception):
    """Raised by the test at the chosen write statement; never by the code under test."""


def _files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir()) if directory.exists() else []


async def _snapshot(storage: SessionStorage) -> dict[str, list[tuple[Any, ...]]]:
    """The five tables, and the archives kept in the database."""
    snapshot = await table_snapshot(storage)
    async with storage.engine.connect() as conn:
        rows = await conn.execute(sa.text("SELECT * FROM session_archives ORDER BY id"))
        snapshot["session_archives"] = [tuple(row) for row in rows]
    return snapshot


async def _count_writes(
    templates: Templates, template: Template, name: str, options: dict[str, Any]
) -> list[str]:
    async with templates.clone(template) as target, SessionStorage(target, **options) as storage:
        manager = SessionManager(storage, inject_time_prefix=False)
        before = await _snapshot(storage)
        writes: list[str] = []

        def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
            if is_session_write(statement):
                writes.append(" ".join(statement.split())[:60])

        with listening(storage, "before_cursor_execute", record):
            await OPERATIONS[name](manager, template.context)
        assert await _snapshot(storage) != before, f"{name} changed nothing"
    return writes


async def _crash_at(
    templates: Templates,
    template: Template,
    name: str,
    k: int,
    archive_dir: Path,
    options: dict[str, Any],
) -> None:
    """Run ``name`` on a fresh clone with its ``k``-th write crashing; check the aftermath."""
    async with templates.clone(template) as target, SessionStorage(target, **options) as storage:
        manager = SessionManager(storage, inject_time_prefix=False)
        before = await _snapshot(storage)
        files_before = _files(archive_dir)
        crash = InjectedCrash(f"crash at write {k} of {name}")
        seen: list[str] = []

        def crash_at_k(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
            if is_session_write(statement):
                seen.append(" ".join(statement.split())[:60])
                if len(seen) == k:
                    raise crash

        with (
            listening(storage, "before_cursor_execute", crash_at_k),
            pytest.raises(InjectedCrash) as caught,
        ):
            await OPERATIONS[name](manager, template.context)

        assert caught.value is crash, f"k={k}: the caller got another exception"
        assert len(seen) == k, f"k={k}: writes went on after the crash: {seen[k:]}"
        assert await _snapshot(storage) == before, f"k={k} ({seen[-1]}) left changes"
        assert _files(archive_dir) == files_before, f"k={k}: archive files left behind"
        assert storage.engine.pool.checkedout() == 0

        await OPERATIONS[name](manager, template.context)
        assert await _snapshot(storage) != before


async def _crash_everywhere(
    templates: Templates, name: str, archive_dir: Path, options: dict[str, Any]
) -> list[str]:
    template = await templates.prepare()
    writes = await _count_writes(templates, template, name, options)
    assert len(writes) >= 2, f"{name} is not a multi-row operation: {writes}"

    for k in range(1, len(writes) + 1):
        await _crash_at(templates, template, name, k, archive_dir, options)
    return writes


@pytest.mark.parametrize("name", CRASHED)
async def test_a_crash_at_any_write_leaves_every_table_as_it_was(
    name: str, templates: Templates, _archive_dir: Path
) -> None:
    await _crash_everywhere(templates, name, _archive_dir, {})


async def test_a_reset_archiving_to_the_database_commits_its_row_with_it_or_not_at_all(
    templates: Templates, _archive_dir: Path
) -> None:
    """``archive_store="database"``: the archive row is one of the reset's writes, before
    its deletes; a crash at any of them leaves neither the row nor the reset."""
    writes = await _crash_everywhere(
        templates, "reset", _archive_dir, {"archive_store": "database"}
    )
    archive = next(i for i, w in enumerate(writes) if "session_archives" in w)
    deletes = [i for i, w in enumerate(writes) if w.startswith("DELETE")]
    assert deletes and archive < min(deletes), writes
    assert _files(_archive_dir) == []
