"""A crash at every write statement of every multi-row operation changes nothing.

For each operation, a successful run on a clone of a populated store counts its write
statements (INSERT, UPDATE, DELETE; the compaction lease's aside). Then, for every k of that
count, a fresh clone of the same store runs the operation with the k-th write raising an
exception of the test's own:
the caller gets exactly that exception, every table is exactly as before, no reset
archive (not even a temporary file) is left, and the store then runs the operation fine.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from opensquilla.session import SessionManager, SessionStorage
from tests.helpers import table_snapshot

from .scenarios import OPERATIONS, Template, Templates, is_session_write, listening

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


async def _count_writes(templates: Templates, template: Template, name: str) -> list[str]:
    async with templates.clone(template) as target, SessionStorage(target) as storage:
        manager = SessionManager(storage, inject_time_prefix=False)
        before = await table_snapshot(storage)
        writes: list[str] = []

        def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
            if is_session_write(statement):
                writes.append(" ".join(statement.split())[:60])

        with listening(storage, "before_cursor_execute", record):
            await OPERATIONS[name](manager, template.context)
        assert await table_snapshot(storage) != before, f"{name} changed nothing"
    return writes


async def _crash_at(
    templates: Templates, template: Template, name: str, k: int, archive_dir: Path
) -> None:
    """Run ``name`` on a fresh clone with its ``k``-th write crashing; check the aftermath."""
    async with templates.clone(template) as target, SessionStorage(target) as storage:
        manager = SessionManager(storage, inject_time_prefix=False)
        before = await table_snapshot(storage)
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
        assert await table_snapshot(storage) == before, f"k={k} ({seen[-1]}) left changes"
        assert _files(archive_dir) == files_before, f"k={k}: archive files left behind"
        assert storage.engine.pool.checkedout() == 0

        await OPERATIONS[name](manager, template.context)
        assert await table_snapshot(storage) != before


@pytest.mark.parametrize("name", CRASHED)
async def test_a_crash_at_any_write_leaves_every_table_as_it_was(
    name: str, templates: Templates, _archive_dir: Path
) -> None:
    template = await templates.prepare()
    writes = await _count_writes(templates, template, name)
    assert len(writes) >= 2, f"{name} is not a multi-row operation: {writes}"

    for k in range(1, len(writes) + 1):
        await _crash_at(templates, template, name, k, _archive_dir)
