"""copy: every session from one database to another, verified, resumable.

Each test copies between a SQLite file and the test backend, so the SQLite session runs
SQLite -> SQLite and the PostgreSQL session runs SQLite -> PostgreSQL -> SQLite.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from opensquilla.session.db.repos.transfer import TransferRepository

from .support import cli, dump_tables, opened, run, seed_rich


def _copy(source: str, target: str, *extra: str):
    return cli(None, "copy", "--from", source, "--to", target, "--json", *extra)


def test_copy_to_the_backend_and_back_keeps_every_row_and_column(
    database: str, tmp_path: Path
) -> None:
    source = str(tmp_path / "source.db")
    seeded = run(seed_rich(source))
    original = run(dump_tables(source))

    there = _copy(source, database)
    assert there.exit_code == 0, there.output
    report = json.loads(there.stdout)
    assert report["ok"] is True
    assert (report["total"], report["copied"], report["skipped"]) == (4, 4, 0)
    assert [check["table"] for check in report["verification"]] == list(original)
    for check in report["verification"]:
        assert check["ok"] and check["source_rows"] == len(original[check["table"]])
    assert run(dump_tables(database)) == original

    back = str(tmp_path / "back.db")
    returned = _copy(database, back)
    assert returned.exit_code == 0, returned.output
    assert run(dump_tables(back)) == original

    # The copies are real databases: their id sequences continue after the copied ids.
    async def append(dsn: str) -> int:
        async with opened(dsn) as manager:
            entry = await manager.append_message(seeded.reset, "user", "after the copy")
            assert entry.id is not None
            return entry.id

    highest = max(row["id"] for row in original["transcript_entries"])
    assert run(append(database)) > highest
    assert run(append(back)) > highest


def test_copy_into_an_empty_database_migrates_it_first(database: str, empty_database: str) -> None:
    run(seed_rich(database, big=False))
    result = _copy(database, empty_database)
    assert result.exit_code == 0, result.output
    assert run(dump_tables(empty_database)) == run(dump_tables(database))


def test_rerun_skips_what_is_there_and_never_overwrites(database: str, tmp_path: Path) -> None:
    source = str(tmp_path / "source.db")
    seeded = run(seed_rich(source, big=False))
    assert _copy(source, database).exit_code == 0

    again = _copy(source, database)
    assert again.exit_code == 0, again.output
    report = json.loads(again.stdout)
    assert (report["copied"], report["skipped"], report["conflicts"]) == (0, 4, [])

    async def change_target() -> None:
        async with opened(database) as manager:
            await manager.update(seeded.branch, label="changed in the target")

    run(change_target())
    conflicting = _copy(source, database)
    assert conflicting.exit_code == 2
    report = json.loads(conflicting.stdout)
    assert report["conflicts"] == [seeded.branch] and report["ok"] is False
    failed = {check["table"] for check in report["verification"] if not check["ok"]}
    assert failed == {"sessions"}
    labels = {r["session_key"]: r["label"] for r in run(dump_tables(database))["sessions"]}
    assert labels[seeded.branch] == "changed in the target"

    human = cli(None, "copy", "--from", source, "--to", database)
    assert human.exit_code == 2
    assert "conflict" in human.stdout and "verification FAILED" in human.stdout


@pytest.mark.parametrize("failure", [RuntimeError("injected failure"), KeyboardInterrupt()])
def test_interrupted_copy_resumes_to_completion(
    database: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failure: BaseException
) -> None:
    source = str(tmp_path / "source.db")
    seeded = run(seed_rich(source, big=False))
    real = TransferRepository.insert_children
    calls = {"n": 0}

    async def fail_in_third_session(repo, bundle):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        filled = await real(repo, bundle)  # its rows are in, its transaction is open
        if calls["n"] == 3:
            raise failure
        return filled

    monkeypatch.setattr(TransferRepository, "insert_children", fail_in_third_session)
    broken = cli(None, "copy", "--from", source, "--to", database, "--jobs", "1")
    expected_code = 130 if isinstance(failure, KeyboardInterrupt) else 1
    assert broken.exit_code == expected_code, broken.output
    assert "Traceback" not in broken.output
    partial = run(dump_tables(database))
    done = seeded.keys[:2]
    assert [row["session_key"] for row in partial["sessions"]] == done
    for name, rows in partial.items():
        assert {row["session_key"] for row in rows} <= set(done), name

    monkeypatch.setattr(TransferRepository, "insert_children", real)
    resumed = _copy(source, database)
    assert resumed.exit_code == 0, resumed.output
    report = json.loads(resumed.stdout)
    assert (report["copied"], report["skipped"]) == (2, 2) and report["ok"] is True
    assert run(dump_tables(database)) == run(dump_tables(source))


def test_progress_and_summary_for_people(database: str, tmp_path: Path) -> None:
    source = str(tmp_path / "source.db")
    run(seed_rich(source, big=False))
    result = cli(None, "copy", "--from", source, "--to", database, "--batch-size", "3")
    assert result.exit_code == 0, result.output
    assert "copying" in result.stderr
    assert "4 session(s): 4 copied, 0 already there" in result.stdout
    assert "verified: identical" in result.stdout


@pytest.mark.parametrize("failure", [RuntimeError("injected failure"), KeyboardInterrupt()])
def test_parallel_copy_interrupted_keeps_whole_sessions_only(
    database: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failure: BaseException
) -> None:
    """With several sessions in flight, a failure cancels the others: whatever reached the
    target is a whole session, identical to the source; a re-run completes the copy."""
    source = str(tmp_path / "source.db")

    async def many() -> None:
        async with opened(source) as manager:
            for index in range(12):
                key = f"agent:main:p{index:02d}"
                await manager.create(key)
                for turn in range(5):
                    await manager.append_message(key, "user", f"turn {turn}", token_count=1)

    run(many())
    original = run(dump_tables(source))
    real = TransferRepository.insert_children
    calls = {"n": 0}

    async def fail_once(repo, bundle):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        mine = calls["n"]  # others may call meanwhile: remember which call this is
        filled = await real(repo, bundle)
        if mine == 6:
            raise failure
        return filled

    monkeypatch.setattr(TransferRepository, "insert_children", fail_once)
    broken = cli(None, "copy", "--from", source, "--to", database, "--jobs", "4")
    expected_code = 130 if isinstance(failure, KeyboardInterrupt) else 1
    assert broken.exit_code == expected_code, (calls, broken.output)
    assert "Traceback" not in broken.output
    partial = run(dump_tables(database))
    copied = {row["session_key"] for row in partial["sessions"]}
    assert len(copied) < 12
    for name, rows in partial.items():  # every copied session is complete, nothing else
        expected = [row for row in original[name] if row["session_key"] in copied]
        assert rows == expected, name

    monkeypatch.setattr(TransferRepository, "insert_children", real)
    resumed = _copy(source, database, "--jobs", "4", "--batch-size", "5")
    assert resumed.exit_code == 0, resumed.output
    report = json.loads(resumed.stdout)
    assert report["skipped"] == len(copied) and report["copied"] == 12 - len(copied)
    assert run(dump_tables(database)) == original
