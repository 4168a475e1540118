"""The export format itself, without a database: values, canonical forms, the reader."""

from __future__ import annotations

import io
import math
from pathlib import Path

import pytest

from opensquilla.session.db.repos.transfer import table_layout
from opensquilla.session.models.reports import SessionRows
from opensquilla.session.transfer import (
    ExportFormatError,
    ExportReader,
    ExportWriter,
    canonical_row,
    session_digest,
)

LAYOUT = table_layout()


def _session(**changes: object) -> SessionRows:
    row = {name: None for name, _ in LAYOUT["sessions"]}
    row.update(session_key="agent:main:x", session_id="g1", created_at=1, updated_at=2)
    row.update(changes)
    return SessionRows(
        row,
        {
            "transcript_entries": [],
            "compacted_transcript_entries": [],
            "session_summaries": [],
            "session_context_states": [],
        },
    )


def _write(rows: list[SessionRows], path: Path) -> bytes:
    buffer = io.BytesIO()
    writer = ExportWriter(buffer, LAYOUT)
    writer.header()
    for session in rows:
        writer.session(session)
    writer.footer()
    path.write_bytes(buffer.getvalue())
    return buffer.getvalue()


def test_layout_names_every_column_with_its_kind() -> None:
    kinds = dict(LAYOUT["sessions"])
    assert kinds["session_key"] == "text" and kinds["epoch"] == "int"
    assert kinds["estimated_cost_usd"] == "float" and kinds["fast_mode"] == "bool"
    assert kinds["delivery_context"] == "json"
    assert dict(LAYOUT["transcript_entries"])["id"] == "int"


def test_non_finite_floats_and_odd_text_survive(tmp_path: Path) -> None:
    values = {
        "estimated_cost_usd": math.inf,
        "total_cost_usd": -math.inf,
        "billed_cost_usd": math.nan,
        "label": "tab\tnewline\nNUL\x00 line separator\u2028 end",
        "origin": {"z": 1, "a": [None, {"deep": "\x00"}]},
    }
    data = _write([_session(**values)], tmp_path / "x.jsonl")
    assert data.count(b"\n") == 4  # header, session, end, footer: one object per line
    (read,) = list(ExportReader(tmp_path / "x.jsonl", LAYOUT).sessions())
    assert read.session["estimated_cost_usd"] == math.inf
    assert read.session["total_cost_usd"] == -math.inf
    assert math.isnan(read.session["billed_cost_usd"])
    assert read.session["label"] == values["label"]
    assert list(read.session["origin"]) == ["z", "a"]  # stored key order is kept
    assert read.session["origin"] == values["origin"]


def test_a_value_of_the_wrong_kind_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ExportFormatError, match=r"sessions\.epoch"):
        _write([_session(epoch="seven")], tmp_path / "x.jsonl")


def test_canonical_rows_ignore_only_json_key_order() -> None:
    """jsonb does not keep object key order, so it is no part of a stored value: the same
    values in another key order are the same row. Every value still counts."""
    columns = LAYOUT["sessions"]
    one = _session(origin={"b": 1e16, "a": [1.0, 2.5]}, estimated_cost_usd=0.0)
    same = _session(origin={"a": [1.0, 2.5], "b": 1e16}, estimated_cost_usd=0.0)
    assert canonical_row(one.session, columns) == canonical_row(same.session, columns)
    assert session_digest(one, LAYOUT) == session_digest(same, LAYOUT)
    swapped = _session(origin={"a": 1e16, "b": [1.0, 2.5]}, estimated_cost_usd=0.0)
    assert session_digest(swapped, LAYOUT) != session_digest(one, LAYOUT)


def test_duplicate_sessions_and_stray_rows_are_refused(tmp_path: Path) -> None:
    data = _write([_session(), _session()], tmp_path / "twice.jsonl")
    assert data
    with pytest.raises(ExportFormatError, match="appears twice"):
        list(ExportReader(tmp_path / "twice.jsonl", LAYOUT).sessions())
    lines = _write([_session()], tmp_path / "one.jsonl").splitlines(keepends=True)
    (tmp_path / "stray.jsonl").write_bytes(lines[0] + lines[2] + lines[1] + lines[3])
    with pytest.raises(ExportFormatError, match="closes no session"):
        list(ExportReader(tmp_path / "stray.jsonl", LAYOUT).sessions())
