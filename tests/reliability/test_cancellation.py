"""Cancelling a manager operation at any point leaves it whole or undone, never half.

A reference run on a clone of a populated store gives the "after" state and the number
of statements the operation runs. Then, on a fresh clone each time, the operation runs
as a task that is cancelled at every point in turn: before it starts working, while its
first statement is in flight, and at whatever it awaits next after each statement (the
next statement, a file write, the COMMIT). The clock and UUIDs are frozen during each
run, so a run that went through writes exactly the rows of the reference run.

Afterwards the tables equal the "before" or the "after" state, no connection is left
checked out, no transaction is left open (another connection can take the write lock
at once), a reset that went through left its archive file (and one that did not left
no file at all), and the store keeps working.
"""

from __future__ import annotations

import asyncio
import re
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from opensquilla.session import SessionManager, SessionStorage

from .scenarios import (
    KEY,
    OPERATIONS,
    Snapshot,
    Template,
    Templates,
    comparable_snapshot,
    frozen_clock_and_ids,
    listening,
)
from .support import HANG_GUARD, admin_dsn, database_name, is_postgres_target

CANCELLED = (
    "append",
    "reset",
    "branch_full",
    "truncate",
    "compact",
    "persist",
    "cap",
    "prune",
    "update",
    "finish",
)
# How long a condition that must come true (a connection handed back by a clean-up the
# cancellation left running, a file removed by a worker thread) may take before it counts
# as never: a hang guard, far above what a loaded machine needs.
EVENTUALLY = 60.0


# The store tag in archive names: on SQLite each clone has its own (a hash of its path).
_STORE_TAG = re.compile(r"\.[0-9a-f]{8}(?=\.json|\.tmp$)")


def _archive_files(directory: Path) -> list[str]:
    """The names in ``directory``, their store tags cut, so that clones compare."""
    if not directory.exists():
        return []
    return sorted(_STORE_TAG.sub("", p.name) for p in directory.iterdir())


async def _eventually(check: Callable[[], Awaitable[bool]], seconds: float = EVENTUALLY) -> bool:
    deadline = time.monotonic() + seconds
    while True:
        if await check():
            return True
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.02)


async def _no_transaction_left_open(target: str) -> bool:
    """Postgres: no session of this database idles inside a transaction. SQLite: another
    connection gets the write lock without waiting."""
    if is_postgres_target(target):
        import asyncpg

        conn = await asyncpg.connect(admin_dsn(target))
        try:
            idle = await conn.fetchval(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = $1 AND state LIKE 'idle in transaction%'",
                database_name(target),
            )
        finally:
            await conn.close()
        return idle == 0
    db = sqlite3.connect(target, timeout=0, isolation_level=None)
    try:
        db.execute("BEGIN IMMEDIATE")
        db.execute("ROLLBACK")
        return True
    except sqlite3.OperationalError:
        return False
    finally:
        db.close()


class Run:
    """One run of an operation on a fresh clone, optionally cancelled at one point."""

    def __init__(self, templates: Templates, template: Template, name: str, frozen: int) -> None:
        self.templates = templates
        self.template = template
        self.name = name
        self.frozen = frozen

    async def reference(
        self, archive_dir: Path, monkeypatch: pytest.MonkeyPatch, *, mask: bool
    ) -> tuple[Snapshot, Snapshot, int, list[str]]:
        """``(before, after, statements, archive files)`` of an uninterrupted run."""
        monkeypatch.setenv("OPENSQUILLA_SESSION_ARCHIVE_DIR", str(archive_dir))
        async with (
            self.templates.clone(self.template) as target,
            SessionStorage(target) as storage,
        ):
            manager = SessionManager(storage, inject_time_prefix=False)
            before = await comparable_snapshot(storage, mask_message_ids=mask)
            statements = 0

            def count(*args: Any) -> None:
                nonlocal statements
                statements += 1

            with (
                listening(storage, "before_cursor_execute", count),
                frozen_clock_and_ids(self.frozen),
            ):
                await OPERATIONS[self.name](manager, self.template.context)
            after = await comparable_snapshot(storage, mask_message_ids=mask)
        return before, after, statements, _archive_files(archive_dir)

    async def cancelled_at(
        self,
        mode: str,
        k: int,
        archive_dir: Path,
        monkeypatch: pytest.MonkeyPatch,
        *,
        mask: bool,
        before: Snapshot,
        after: Snapshot,
        reference_files: list[str],
    ) -> str:
        """Cancel at ``(mode, k)``; check everything; ``"undone"``, ``"whole"`` or
        ``"finished"`` (the cancellation came after the last await)."""
        where = f"{self.name}: cancelled {mode} statement {k}"
        monkeypatch.setenv("OPENSQUILLA_SESSION_ARCHIVE_DIR", str(archive_dir))
        async with (
            self.templates.clone(self.template) as target,
            SessionStorage(target) as storage,
        ):
            manager = SessionManager(storage, inject_time_prefix=False)
            reached = asyncio.Event()
            seen = 0

            def hook(*args: Any) -> None:
                nonlocal seen
                seen += 1
                if seen == k:
                    reached.set()

            event = "before_cursor_execute" if mode == "during" else "after_cursor_execute"
            with listening(storage, event, hook), frozen_clock_and_ids(self.frozen):
                task = asyncio.create_task(OPERATIONS[self.name](manager, self.template.context))
                if mode == "start":
                    await asyncio.sleep(0)
                else:
                    waiter = asyncio.create_task(reached.wait())
                    await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
                    waiter.cancel()
                    assert reached.is_set(), f"{where}: the point was never reached"
                task.cancel()
                try:
                    await task
                    outcome = "finished"
                except asyncio.CancelledError:
                    outcome = "cancelled"

            # First the clean-up the cancellation left running (SQLAlchemy closes a
            # connection under a shield) must be over: nothing is then in flight that could
            # still change the tables after they are compared.
            assert await _eventually(
                lambda: asyncio.sleep(0, storage.engine.pool.checkedout() == 0)
            ), f"{where}: {storage.engine.pool.checkedout()} connection(s) left checked out"
            assert await _eventually(lambda: _no_transaction_left_open(target)), (
                f"{where}: a transaction was left open"
            )
            state = await comparable_snapshot(storage, mask_message_ids=mask)
            assert state in (before, after), f"{where}: a half-applied change"
            if outcome == "finished":
                assert state == after, f"{where}: finished but not applied"
                result = "finished"
            else:
                result = "whole" if state == after else "undone"

            if self.name == "reset":
                expected = reference_files if state == after else []
                assert await _eventually(
                    lambda: asyncio.sleep(0, _archive_files(archive_dir) == expected)
                ), (
                    f"{where}: the reset is {result} but the archive directory holds "
                    f"{_archive_files(archive_dir)} instead of {expected}"
                )

            entry = await manager.append_message(KEY, "user", "still working")
            assert (await manager.get_transcript(KEY))[-1].id == entry.id
        return result


@pytest.mark.parametrize("name", CANCELLED)
async def test_a_cancelled_operation_is_whole_or_undone(
    name: str,
    backend: Any,
    templates: Templates,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    template = await templates.prepare()
    run = Run(templates, template, name, frozen=time.time_ns())
    mask = backend.is_postgres
    before, after, statements, reference_files = await run.reference(
        tmp_path / "reference", monkeypatch, mask=mask
    )
    assert before != after, f"{name} changed nothing"
    if name == "reset":
        assert len(reference_files) == 1 and not reference_files[0].startswith(".")

    points = [("start", 0), ("during", 1)] + [("after", k) for k in range(1, statements + 1)]
    results: Counter[str] = Counter()
    failures: list[str] = []
    for index, (mode, k) in enumerate(points):
        try:
            results[
                await run.cancelled_at(
                    mode,
                    k,
                    tmp_path / f"point-{index}",
                    monkeypatch,
                    mask=mask,
                    before=before,
                    after=after,
                    reference_files=reference_files,
                )
            ] += 1
        except AssertionError as exc:  # keep going: report every point that fails
            failures.append(str(exc).splitlines()[0])
    assert failures == [], "\n".join(failures)
    assert results["undone"] > 0, f"{name}: no cancellation undid anything: {results}"


async def test_the_checks_notice_a_connection_held_in_a_transaction(database: str) -> None:
    """The open-transaction probe used above must see a transaction another connection
    is holding, and the pool count must see the connection (otherwise neither check could
    ever fail)."""
    async with SessionStorage(database) as storage:
        async with storage.uow.write() as tx:
            await tx.sessions.increment_epoch("agent:main:none")
            assert not await _no_transaction_left_open(database)
            assert storage.engine.pool.checkedout() == 1
        assert await _no_transaction_left_open(database)
        assert storage.engine.pool.checkedout() == 0


async def test_a_reset_cancelled_while_its_archive_is_written_leaves_no_file(
    manager: SessionManager,
    storage: SessionStorage,
    _archive_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The archive is written on a worker thread, which a cancellation cannot stop: once it
    finishes, its temporary file (a whole conversation) must not stay behind."""
    from opensquilla.session.fs import reset_archive as archive_module
    from opensquilla.session.models import SessionIntent
    from tests.helpers import table_snapshot

    await manager.create(KEY)
    await manager.append_message(KEY, "user", "to be archived")
    before = await table_snapshot(storage)
    real_stage_file = archive_module.stage_file
    written, released = threading.Event(), threading.Event()

    def blocked_stage_file(directory: Path, name: str, data: bytes) -> Any:
        staged = real_stage_file(directory, name, data)
        written.set()
        # Still busy when the reset is cancelled: the test lets it go only afterwards.
        if not released.wait(HANG_GUARD):
            raise TimeoutError("the test never released the archive writer")
        return staged

    monkeypatch.setattr(archive_module, "stage_file", blocked_stage_file)
    task = asyncio.create_task(manager.apply_intent(KEY, SessionIntent.RESET_SAME_KEY))
    try:
        assert await asyncio.to_thread(written.wait, HANG_GUARD)
        assert _archive_files(_archive_dir), "the temporary archive should exist by now"
        task.cancel()  # the task stops waiting for the thread at once; the thread goes on
    finally:
        released.set()
    with pytest.raises(asyncio.CancelledError):
        await task

    assert await _eventually(lambda: asyncio.sleep(0, _archive_files(_archive_dir) == [])), (
        f"left behind: {_archive_files(_archive_dir)}"
    )
    assert await table_snapshot(storage) == before
    monkeypatch.setattr(archive_module, "stage_file", real_stage_file)
    await manager.apply_intent(KEY, SessionIntent.RESET_SAME_KEY)
    assert len(_archive_files(_archive_dir)) == 1


async def test_a_reset_cancelled_after_its_commit_still_publishes_its_archive(
    manager: SessionManager,
    storage: SessionStorage,
    _archive_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A cancellation that lands after the reset committed, before its archive was renamed
    into place (the rename not yet started on its thread), must not leave the only copy of
    the old generation under its hidden name until the store's next start: the rename runs
    to its end and the cancellation still reaches the caller."""
    from opensquilla.session.models import SessionIntent
    from opensquilla.session.usecases import reset as reset_module

    await manager.create(KEY)
    await manager.append_message(KEY, "user", "to be archived")
    old = await manager.get_session(KEY)
    assert old is not None
    real_publish = reset_module._publish_archive
    publishing = asyncio.Event()

    async def publish_after_a_step(file: Any, key: str) -> Any:
        publishing.set()
        await asyncio.sleep(0)  # the cancellation lands here, before the rename starts
        return await real_publish(file, key)

    monkeypatch.setattr(reset_module, "_publish_archive", publish_after_a_step)
    task = asyncio.create_task(manager.apply_intent(KEY, SessionIntent.RESET_SAME_KEY))
    await asyncio.wait_for(publishing.wait(), HANG_GUARD)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    renewed = await manager.get_session(KEY)
    assert renewed is not None and renewed.session_id != old.session_id  # committed
    assert await _eventually(
        lambda: asyncio.sleep(
            0, [name.startswith(".") for name in _archive_files(_archive_dir)] == [False]
        )
    ), f"the archive was not published: {_archive_files(_archive_dir)}"
