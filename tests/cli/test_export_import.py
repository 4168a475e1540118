"""export / import: the versioned JSONL format, lossless and all-or-nothing per session."""

from __future__ import annotations

import json
from pathlib import Path

from opensquilla.session import transfer

from .support import NUL_TEXT, ONE_MB, cli, dump_tables, opened, run, seed_rich


def _export(dsn: str, path: Path, *args: str) -> bytes:
    result = cli(dsn, "export", "--output", str(path), *args)
    assert result.exit_code == 0, result.output
    return path.read_bytes()


def _records(data: bytes) -> list[dict]:
    return [json.loads(line) for line in data.splitlines()]


def test_round_trip_is_byte_identical(database: str, empty_database: str, tmp_path: Path) -> None:
    seeded = run(seed_rich(database))
    first = _export(database, tmp_path / "first.jsonl")

    imported = cli(empty_database, "import", str(tmp_path / "first.jsonl"), "--json")
    assert imported.exit_code == 0, imported.output
    assert json.loads(imported.stdout)["imported"] == seeded.keys

    second = _export(empty_database, tmp_path / "second.jsonl")
    assert second == first
    # Not only the export agrees: every row and column of every table, ids included.
    assert run(dump_tables(empty_database)) == run(dump_tables(database))


def test_the_file_carries_every_column_and_the_awkward_values(
    database: str, tmp_path: Path
) -> None:
    seeded = run(seed_rich(database))
    records = _records(_export(database, tmp_path / "all.jsonl"))

    header, footer = records[0], records[-1]
    assert header["kind"] == "header" and header["format"] == "opensquilla-session-export"
    assert header["version"] == transfer.FORMAT_VERSION
    assert footer == {
        "kind": "footer",
        "sessions": 4,
        "rows": {
            "sessions": 4,
            "transcript_entries": 14,
            "compacted_transcript_entries": 20,
            "session_summaries": 2,
            "session_context_states": 5,
        },
    }
    layout = dict(header["tables"])
    for record in records:
        if record["kind"] == "session":
            assert list(record["row"]) == [name for name, _ in layout["sessions"]]
        elif record["kind"] == "row":
            assert list(record["row"]) == [name for name, _ in layout[record["table"]]]

    sessions_in_file = [r["row"]["session_key"] for r in records if r["kind"] == "session"]
    assert sessions_in_file == seeded.keys  # code-point order
    rich = next(r["row"] for r in records if r["kind"] == "session" and r["row"]["label"])
    assert rich["label"] == NUL_TEXT
    assert rich["delivery_context"]["channel"] == "web\x00chat"
    assert rich["estimated_cost_usd"] == 0.1 + 0.2
    contents = [r["row"].get("content") for r in records if r["kind"] == "row"]
    assert any(c is not None and len(c) == ONE_MB for c in contents)
    assert NUL_TEXT in contents
    states = [r["row"] for r in records if r.get("table") == "session_context_states"]
    reset_states = [s for s in states if s["session_key"] == seeded.reset]
    assert len(reset_states) == 1 and reset_states[0]["valid"] is False  # older generation
    leftovers = [
        r for r in records if r["kind"] == "row" and r["row"]["session_id"] == "an-older-generation"
    ]
    assert len(leftovers) == 1


def test_single_session_export_and_stdout(database: str, tmp_path: Path) -> None:
    seeded = run(seed_rich(database, big=False))
    to_file = _export(database, tmp_path / "one.jsonl", "--session", seeded.reset)
    to_stdout = cli(database, "export", "--session", seeded.reset)
    assert to_stdout.exit_code == 0, to_stdout.output
    assert to_stdout.stdout.encode() == to_file
    keys = [r["row"]["session_key"] for r in _records(to_file) if r["kind"] == "session"]
    assert keys == [seeded.reset]
    assert oct((tmp_path / "one.jsonl").stat().st_mode & 0o777) == "0o600"

    missing = cli(database, "export", "--session", "agent:main:nope")
    assert missing.exit_code == 1
    assert "Session not found: agent:main:nope" in missing.stderr


def test_import_keeps_ids_and_new_rows_continue_after_them(
    database: str, empty_database: str, tmp_path: Path
) -> None:
    seeded = run(seed_rich(database, big=False))
    path = tmp_path / "x.jsonl"
    _export(database, path)
    assert cli(empty_database, "import", str(path)).exit_code == 0

    async def append_after_import() -> tuple[int, int]:
        async with opened(empty_database) as manager:
            entry = await manager.append_message(seeded.reset, "user", "after the import")
            tables = await dump_tables(empty_database)
        highest = max(row["id"] for row in tables["transcript_entries"] if row["id"] != entry.id)
        assert entry.id is not None
        return entry.id, highest

    new_id, highest_imported = run(append_after_import())
    assert new_id > highest_imported  # the id sequence moved past the imported ids


def test_existing_key_refuses_the_whole_file(
    database: str, empty_database: str, tmp_path: Path
) -> None:
    seeded = run(seed_rich(database, big=False))
    path = tmp_path / "x.jsonl"
    _export(database, path)

    async def occupy() -> None:
        async with opened(empty_database) as manager:
            await manager.create(seeded.reset, label="already here")

    run(occupy())
    before = run(dump_tables(empty_database))
    refused = cli(empty_database, "import", str(path))
    assert refused.exit_code == 1
    assert "already exist" in refused.stderr and seeded.reset in refused.stderr
    assert "Traceback" not in refused.output
    assert run(dump_tables(empty_database)) == before  # nothing was imported

    skipped = cli(empty_database, "import", str(path), "--skip-existing", "--json")
    assert skipped.exit_code == 0, skipped.output
    report = json.loads(skipped.stdout)
    assert report["skipped"] == [seeded.reset]
    assert sorted(report["imported"]) == sorted(set(seeded.keys) - {seeded.reset})
    after = run(dump_tables(empty_database))
    kept = [row for row in after["sessions"] if row["session_key"] == seeded.reset]
    assert kept[0]["label"] == "already here"


def test_newer_format_version_is_refused(empty_database: str, tmp_path: Path) -> None:
    path = tmp_path / "future.jsonl"
    header = {"kind": "header", "format": transfer.FORMAT_NAME, "version": 2, "tables": {}}
    path.write_text(json.dumps(header) + "\n")
    result = cli(empty_database, "import", str(path))
    assert result.exit_code == 1
    assert "version 2" in result.stderr and "newer" in result.stderr
    assert "Traceback" not in result.output


def _damage(lines: list[bytes], index: int, change: dict) -> list[bytes]:
    record = json.loads(lines[index])
    record.update(change)
    copy = list(lines)
    copy[index] = json.dumps(record).encode() + b"\n"
    return copy


def test_damaged_files_import_nothing(database: str, empty_database: str, tmp_path: Path) -> None:
    run(seed_rich(database, big=False))
    good = _export(database, tmp_path / "good.jsonl")
    lines = good.splitlines(keepends=True)
    row_index = next(i for i, line in enumerate(lines) if b'"kind":"row"' in line)
    end_index = next(i for i, line in enumerate(lines) if b'"kind":"end"' in line)
    last_end = max(i for i, line in enumerate(lines) if b'"kind":"end"' in line)
    cases = {
        # the last session's block is cut off: no end line, no footer
        "truncated": lines[:last_end],
        # a line cut in the middle
        "half line": [*lines[:-1], lines[-1][:10]],
        "no footer": lines[:-1],
        "edited row": _damage(
            lines, row_index, {"row": {**json.loads(lines[row_index])["row"], "content": "edited"}}
        ),
        "row count": _damage(lines, end_index, {"rows": {"transcript_entries": 999}}),
        "unknown column": _damage(
            lines, 0, {"tables": {**json.loads(lines[0])["tables"], "sessions": [["nope", "text"]]}}
        ),
        "not json": [lines[0], b"{not json\n", *lines[1:]],
        "empty": [],
    }
    for name, content in cases.items():
        path = tmp_path / f"{name}.jsonl"
        path.write_bytes(b"".join(content))
        result = cli(empty_database, "import", str(path))
        assert result.exit_code == 1, (name, result.output)
        assert result.stderr.startswith("error: "), (name, result.stderr)
        assert len(result.stderr.strip().splitlines()) == 1, (name, result.stderr)
        assert run(dump_tables(empty_database))["sessions"] == [], name


def test_a_failure_inside_one_session_leaves_none_of_it(
    database: str, empty_database: str, tmp_path: Path, monkeypatch
) -> None:
    seeded = run(seed_rich(database, big=False))
    path = tmp_path / "x.jsonl"
    _export(database, path)

    from opensquilla.session.db.repos.transfer import TransferRepository

    real = TransferRepository.insert_children
    calls = {"n": 0}

    async def failing(repo, bundle):  # the second session fails after its rows went in
        calls["n"] += 1
        filled = await real(repo, bundle)
        if calls["n"] == 2:
            raise RuntimeError("injected failure")
        return filled

    monkeypatch.setattr(TransferRepository, "insert_children", failing)
    result = cli(empty_database, "import", str(path))
    assert result.exit_code == 1 and "injected failure" in result.stderr
    tables = run(dump_tables(empty_database))
    assert [row["session_key"] for row in tables["sessions"]] == seeded.keys[:1]
    for name, rows in tables.items():
        assert all(row["session_key"] == seeded.keys[0] for row in rows), name


def test_a_file_with_fewer_columns_gets_the_defaults(
    database: str, empty_database: str, tmp_path: Path
) -> None:
    """An export written before a column existed still imports: the database fills it."""
    seeded = run(seed_rich(database, big=False))
    records = _records(_export(database, tmp_path / "x.jsonl"))
    records[0]["tables"]["sessions"] = [
        column for column in records[0]["tables"]["sessions"] if column[0] != "cost_source"
    ]
    for record in records:
        if record["kind"] == "session":
            del record["row"]["cost_source"]
            del record["row"]["label"]
        if record["kind"] == "end":
            del record["sha256"]
    records[0]["tables"]["sessions"] = [
        column for column in records[0]["tables"]["sessions"] if column[0] != "label"
    ]
    older = tmp_path / "older.jsonl"
    older.write_text("".join(json.dumps(record) + "\n" for record in records))
    result = cli(empty_database, "import", str(older))
    assert result.exit_code == 0, result.output
    rows = run(dump_tables(empty_database))["sessions"]
    assert [row["session_key"] for row in rows] == seeded.keys
    assert {row["cost_source"] for row in rows} == {"none"}
    assert {row["label"] for row in rows} == {None}
