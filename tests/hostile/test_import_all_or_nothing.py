"""Import is all-or-nothing, and a rerun finishes the job.

Values used to be checked for their JSON kind only: a ``null`` in a NOT NULL column, a
duplicate row id, an out-of-range integer or a ``"NaN"`` cost failed half-way, left the
sessions before it written, claimed "nothing of it was written" and the rerun was refused
because of the sessions it had just written. Now every value is checked before anything
is written (the public models' domain, the same on both backends), a block cannot carry
another session's session id, and a session already imported identically is recognised.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from opensquilla.session import SessionStorage, transfer
from opensquilla.session.db.repos.transfer import table_layout
from opensquilla.session.errors import DatabaseUnavailableError, SessionStoreError
from opensquilla.session.models.reports import SessionRows
from opensquilla.session.transfer.store import TransferStore

from ..cli.support import TABLES, cli, dump_tables, opened, run, seed_rich

Record = dict[str, Any]


def _export(dsn: str, path: Path) -> list[Record]:
    result = cli(dsn, "export", "-o", str(path))
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in path.read_bytes().splitlines()]


def _write(records: list[Record], path: Path, *, allow_nan: bool = False) -> Path:
    """Write records as an export file; blocks lose their checksum (hand-edited) and the
    footer is recounted, so only the values differ from a valid export."""
    sessions = 0
    rows: dict[str, int] = dict.fromkeys(records[0]["tables"], 0)
    lines = []
    for record in records:
        record = dict(record)
        if record["kind"] == "end":
            record.pop("sha256", None)
        elif record["kind"] == "session":
            sessions += 1
            rows["sessions"] += 1
        elif record["kind"] == "row":
            rows[record["table"]] += 1
        elif record["kind"] == "footer":
            record.update(sessions=sessions, rows=rows)
        lines.append(json.dumps(record, ensure_ascii=False, allow_nan=allow_nan))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8", errors="surrogatepass")
    return path


def _rows_of(records: list[Record], key: str, table: str) -> list[Record]:
    return [
        r["row"]
        for r in records
        if r["kind"] == "row" and r["table"] == table and r["row"]["session_key"] == key
    ]


def _session_of(records: list[Record], key: str) -> Record:
    return next(
        r["row"] for r in records if r["kind"] == "session" and r["row"]["session_key"] == key
    )


@pytest.fixture
def exported(database: str, tmp_path: Path) -> tuple[list[Record], list[str]]:
    """An export of the seeded sessions (four keys; the rich one third in key order) and
    the keys."""
    seeded = run(seed_rich(database, big=False))
    return _export(database, tmp_path / "source.jsonl"), seeded.keys


RICH = "agent:main:rich"
LAST = "subagent:agent:main:empty"


def _break_null_not_null(records: list[Record]) -> str:
    _rows_of(records, RICH, "transcript_entries")[0]["created_at"] = None
    return "created_at"


def _break_duplicate_id(records: list[Record]) -> str:
    first = _rows_of(records, "agent:helper:branch", "transcript_entries")[0]["id"]
    _rows_of(records, RICH, "transcript_entries")[-1]["id"] = first
    return f"transcript_entries id {first} appears twice"


def _break_int32(records: list[Record]) -> str:
    _session_of(records, LAST)["spawn_depth"] = 2**31
    return "spawn_depth"


def _break_int64(records: list[Record]) -> str:
    _rows_of(records, RICH, "transcript_entries")[1]["token_count"] = 2**63
    return "token_count"


def _break_nan_cost(records: list[Record]) -> str:
    _session_of(records, LAST)["estimated_cost_usd"] = "NaN"
    return "estimated_cost_usd"


def _break_surrogate(records: list[Record]) -> str:
    _rows_of(records, RICH, "transcript_entries")[0]["content"] = "lone \ud800 surrogate"
    return "surrogate"


def _break_missing_id(records: list[Record]) -> str:
    _rows_of(records, RICH, "session_summaries")[0]["id"] = None
    return "no integer id"


def _break_nul_in_identifier(records: list[Record]) -> str:
    _rows_of(records, RICH, "transcript_entries")[0]["role"] = "us\x00er"
    return "role"


def _break_unknown_status(records: list[Record]) -> str:
    _session_of(records, LAST)["status"] = "[/x]"
    return "status"


BREAKERS = [
    _break_null_not_null,
    _break_duplicate_id,
    _break_int32,
    _break_int64,
    _break_nan_cost,
    _break_surrogate,
    _break_missing_id,
    _break_nul_in_identifier,
    _break_unknown_status,
]


@pytest.mark.parametrize("breaker", BREAKERS, ids=lambda f: f.__name__.removeprefix("_break_"))
def test_a_bad_value_anywhere_refuses_the_whole_file_before_any_write(
    exported: tuple[list[Record], list[str]],
    empty_database: str,
    tmp_path: Path,
    breaker: Any,
) -> None:
    records, _ = exported
    broken = copy.deepcopy(records)
    expected = breaker(broken)
    path = _write(broken, tmp_path / "broken.jsonl")
    target = empty_database

    result = cli(target, "import", str(path))

    assert result.exit_code == 1, result.output
    assert len(result.stderr.splitlines()) == 1 and "Traceback" not in result.output
    assert expected in result.stderr
    assert "session '" in result.stderr  # the session is named
    dumped = run(dump_tables(target))
    assert all(rows == [] for rows in dumped.values()), "something was written"
    # Nothing was left behind that would block the corrected file.
    fixed = cli(target, "import", str(_write(records, tmp_path / "fixed.jsonl")))
    assert fixed.exit_code == 0, fixed.output
    assert sorted(run(dump_tables(target))["sessions"], key=lambda r: r["session_key"]) != []


def test_bare_nan_and_too_deep_json_are_refused_by_the_reader(
    exported: tuple[list[Record], list[str]], database: str, tmp_path: Path
) -> None:
    records, _ = exported
    target_before = run(dump_tables(database))
    nan_inside = copy.deepcopy(records)
    _rows_of(nan_inside, RICH, "transcript_entries")[0]["turn_usage"] = {"cost": math.nan}
    path = _write(nan_inside, tmp_path / "nan.jsonl", allow_nan=True)
    assert b"NaN" in path.read_bytes()
    result = cli(database, "import", str(path))
    assert result.exit_code == 1 and "bare NaN is not JSON" in result.stderr

    deep = _write(copy.deepcopy(records), tmp_path / "deep.jsonl").read_text().splitlines()
    index = next(i for i, line in enumerate(deep) if '"turn_usage": null' in line)
    deep[index] = deep[index].replace(
        '"turn_usage": null', '"turn_usage": ' + "[" * 5000 + "]" * 5000
    )
    (tmp_path / "deep.jsonl").write_text("\n".join(deep) + "\n")
    result = cli(database, "import", str(tmp_path / "deep.jsonl"))
    assert result.exit_code == 1 and "nested too deeply" in result.stderr
    assert len(result.stderr.splitlines()) == 1
    assert run(dump_tables(database)) == target_before


async def _victim(dsn: str) -> tuple[str, list[Any]]:
    async with opened(dsn) as manager:
        node = await manager.create("agent:main:victim")
        await manager.append_message("agent:main:victim", "user", "mine", token_count=1)
        return node.session_id, await manager.get_transcript("agent:main:victim")


def _intruder(records: list[Record], *, session_id: str, on_rows: bool) -> list[Record]:
    """A file holding one new session, ``agent:main:intruder``, whose rows (or session
    row) carry ``session_id``; row ids moved far away and every other session id its own,
    so only that session id clashes."""
    source = copy.deepcopy(records)
    keep = [r for r in source if r["kind"] in ("header", "footer")]
    block = [
        r
        for r in source
        if r.get("row", {}).get("session_key") == RICH or r.get("session_key") == RICH
    ]
    for record in block:
        row = record.get("row")
        if row is not None:
            row["session_key"] = "agent:main:intruder"
            if "id" in row:
                row["id"] += 1_000_000
            carrier = "row" if on_rows else "session"
            row["session_id"] = session_id if record["kind"] == carrier else "intruder-own-id"
        else:
            record["session_key"] = "agent:main:intruder"
    return [keep[0], *block, keep[1]]


@pytest.mark.parametrize("on_rows", [True, False], ids=["child rows", "session row"])
def test_a_block_cannot_carry_a_session_id_the_target_gives_another_key(
    exported: tuple[list[Record], list[str]], database: str, tmp_path: Path, on_rows: bool
) -> None:
    records, _ = exported
    victim_id, victim_transcript = run(_victim(database))
    before = run(dump_tables(database))
    path = _write(_intruder(records, session_id=victim_id, on_rows=on_rows), tmp_path / "i.jsonl")

    result = cli(database, "import", str(path))

    assert result.exit_code == 1, result.output
    assert "agent:main:intruder" in result.stderr and victim_id in result.stderr
    assert "agent:main:victim" in result.stderr
    assert run(dump_tables(database)) == before

    async def transcript() -> list[Any]:
        async with opened(database) as manager:
            return await manager.get_transcript("agent:main:victim")

    assert run(transcript()) == victim_transcript


def test_two_sessions_of_one_file_cannot_share_a_session_id(
    exported: tuple[list[Record], list[str]], empty_database: str, tmp_path: Path
) -> None:
    records, _ = exported
    shared = copy.deepcopy(records)
    taken = _session_of(shared, RICH)["session_id"]
    _session_of(shared, LAST)["session_id"] = taken
    result = cli(empty_database, "import", str(_write(shared, tmp_path / "shared.jsonl")))
    assert result.exit_code == 1
    assert taken in result.stderr and LAST in result.stderr and RICH in result.stderr
    assert all(rows == [] for rows in run(dump_tables(empty_database)).values())


def test_row_ids_taken_in_the_target_refuse_the_file_up_front(
    exported: tuple[list[Record], list[str]], database: str, tmp_path: Path
) -> None:
    """The import keeps ids: a target that already uses one of them refuses the file
    before writing, naming the table, the id and the session (not half-way)."""
    records, _ = exported
    renamed = copy.deepcopy(records)
    for record in renamed:
        row = record.get("row")
        if row is not None:
            row["session_key"] = "copy:" + row["session_key"]
            row["session_id"] = "copy-" + row["session_id"]
        if record["kind"] == "end":
            record["session_key"] = "copy:" + record["session_key"]
    before = run(dump_tables(database))
    result = cli(database, "import", str(_write(renamed, tmp_path / "renamed.jsonl")))
    assert result.exit_code == 1
    assert "is already used in the target" in result.stderr and "'copy:" in result.stderr
    assert "nothing was imported" in result.stderr
    assert run(dump_tables(database)) == before


@contextlib.contextmanager
def _connection_lost_at_the_second_insert() -> Iterator[None]:
    """While inside: the target's connection is lost while the second session is written."""
    real = TransferStore.insert
    calls = {"n": 0}

    async def insert(self: TransferStore, rows: SessionRows, **options: Any) -> bool:
        calls["n"] += 1
        if calls["n"] == 2:
            raise DatabaseUnavailableError("connection lost (injected)")
        return await real(self, rows, **options)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(TransferStore, "insert", insert)
        yield


def test_a_failure_mid_import_is_reported_accurately_and_a_rerun_finishes(
    database: str, empty_database: str, tmp_path: Path
) -> None:
    seeded = run(seed_rich(database, big=False))
    path = tmp_path / "all.jsonl"
    _export(database, path)

    async def first_run() -> str:
        async with SessionStorage(empty_database) as storage:
            with pytest.raises(SessionStoreError) as caught:
                await transfer.import_sessions(storage, path)
        return str(caught.value)

    with _connection_lost_at_the_second_insert():
        message = run(first_run())
    first, second = seeded.keys[0], seeded.keys[1]
    assert f"import stopped at session {second!r}" in message
    assert f"1 session(s) imported before it stay ({first!r})" in message
    assert "run the same import again" in message
    after_failure = run(dump_tables(empty_database))
    assert [row["session_key"] for row in after_failure["sessions"]] == [first]

    rerun = cli(empty_database, "import", str(path), "--json")
    assert rerun.exit_code == 0, rerun.output
    report = json.loads(rerun.stdout)
    assert report["unchanged"] == [first] and report["imported"] == seeded.keys[1:]
    assert run(dump_tables(empty_database)) == run(dump_tables(database))


def test_importing_the_same_file_again_changes_nothing(
    database: str, empty_database: str, tmp_path: Path
) -> None:
    seeded = run(seed_rich(database, big=False))
    path = tmp_path / "all.jsonl"
    _export(database, path)
    assert cli(empty_database, "import", str(path)).exit_code == 0
    before = run(dump_tables(empty_database))

    again = cli(empty_database, "import", str(path))

    assert again.exit_code == 0, again.output
    assert f"imported 0 session(s); {len(seeded.keys)} already imported" in again.stdout
    assert run(dump_tables(empty_database)) == before


def test_a_key_with_other_contents_still_refuses_the_file(
    database: str, empty_database: str, tmp_path: Path
) -> None:
    run(seed_rich(database, big=False))
    path = tmp_path / "all.jsonl"
    _export(database, path)
    assert cli(empty_database, "import", str(path)).exit_code == 0

    async def change() -> None:
        async with opened(empty_database) as manager:
            await manager.append_message(RICH, "user", "written after the import")

    run(change())
    before = run(dump_tables(empty_database))
    again = cli(empty_database, "import", str(path))
    assert (
        again.exit_code == 1 and "already exist in the target with other contents" in again.stderr
    )
    assert RICH in again.stderr
    assert run(dump_tables(empty_database)) == before
    skipping = cli(empty_database, "import", str(path), "--skip-existing", "--json")
    assert skipping.exit_code == 0
    assert json.loads(skipping.stdout)["skipped"] == [RICH]
    assert run(dump_tables(empty_database)) == before


# -- property: a random bad value is refused with nothing written, or round-trips exactly --

_HOSTILE = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([2**31 - 1, 2**31, 2**63 - 1, 2**63, -(2**63), -(2**63) - 1]),
    st.floats(allow_nan=False).filter(lambda f: not (f == 0 and math.copysign(1, f) < 0)),
    st.sampled_from(["NaN", "Infinity", "-Infinity", "", "\x00", "a\x00b", "\ud800", "[/x]"]),
    st.text(max_size=20),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


async def _clear(target: str) -> None:
    async with SessionStorage(target) as storage, storage.engine.begin() as conn:
        for table, _ in TABLES.values():
            await conn.execute(sa.delete(table))


@settings(max_examples=20, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_single_bad_value_is_refused_whole_or_imported_exactly(
    exported: tuple[list[Record], list[str]], empty_database: str, tmp_path: Path, data: Any
) -> None:
    records, _ = exported
    target = empty_database
    run(_clear(target))  # the previous example may have imported
    mutated = copy.deepcopy(records)
    carriers = [r for r in mutated if r["kind"] in ("session", "row")]
    record = data.draw(st.sampled_from(carriers), label="record")
    column = data.draw(st.sampled_from(sorted(record["row"])), label="column")
    record["row"][column] = data.draw(_HOSTILE, label="value")
    path = _write(mutated, tmp_path / "mutated.jsonl")

    async def attempt() -> bool:
        async with SessionStorage(target) as storage:
            try:
                await transfer.import_sessions(storage, path)
            except SessionStoreError:
                return False
            return True

    accepted = asyncio.run(attempt())
    dumped = run(dump_tables(target))
    if not accepted:
        assert all(rows == [] for rows in dumped.values()), "a refused file wrote something"
        return
    reexported = tmp_path / "again.jsonl"
    assert cli(target, "export", "-o", str(reexported)).exit_code == 0
    layout = table_layout()
    wanted = list(transfer.ExportReader(path, layout).sessions())
    got = list(transfer.ExportReader(reexported, layout).sessions())
    assert [(s.session, s.children) for s in got] == [(s.session, s.children) for s in wanted]
