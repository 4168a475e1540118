"""Strict JSON text for the CLI's ``--json`` output and reset archive files."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from opensquilla.session.fs.reset_archive import encode_document
from opensquilla.session.support.jsontext import strict_json

ORDINARY: list[Any] = [
    {"a": [1, 2.5, None, True, False, "x"], "b": {"c": "é 🦑"}, "": []},
    [],
    {},
    "plain",
    -7,
    1e300,
]


@pytest.mark.parametrize("value", ORDINARY)
@pytest.mark.parametrize("indent", [2, None])
def test_ordinary_values_read_back_as_json_dumps_gives_them(value: Any, indent: int | None) -> None:
    assert json.loads(strict_json(value, indent)) == value


def test_non_finite_floats_become_strings_never_bare_nan() -> None:
    text = strict_json({"n": [math.nan, math.inf, -math.inf]})
    assert json.loads(text, parse_constant=pytest.fail) == {"n": ["NaN", "Infinity", "-Infinity"]}


def test_nesting_deeper_than_python_recursion_is_encoded() -> None:
    deep: Any = "leaf"
    for _ in range(50_000):
        deep = [deep]
    text = strict_json({"deep": deep}, None)
    assert text.count("[") == 50_000
    assert text.endswith('"leaf"' + "]" * 50_000 + "}")


def test_terminal_controls_are_escaped_and_read_back() -> None:
    value = {"\x1b[31m": "bell\x07 ret\r csi\x9b rlo\u202e"}
    text = strict_json(value)
    assert not any(char in text for char in "\x1b\x07\r\x9b\u202e")
    assert json.loads(text) == value


def test_archive_files_are_strict_json() -> None:
    document = {"session": {"total_cost_usd": math.nan}, "transcript_entries": [[[["x"]]]]}
    decoded = json.loads(encode_document(document), parse_constant=pytest.fail)
    assert decoded == {"session": {"total_cost_usd": "NaN"}, "transcript_entries": [[[["x"]]]]}
