"""The command line's help and layout: flags shown as flags, every option and argument
described, ``-v`` counted, session keys printed whole, no empty parentheses."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer

from opensquilla.session.cli import app

from .support import cli, opened, run

NARROW = {"COLUMNS": "110"}


def _commands() -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every command and group, with the words that reach it (typer's own click types)."""
    stack: list[tuple[tuple[str, ...], Any]] = [((), typer.main.get_command(app))]
    while stack:
        path, command = stack.pop()
        yield path, command
        subcommands = getattr(command, "commands", {})
        stack.extend(((*path, name), sub) for name, sub in subcommands.items())


COMMANDS = sorted(_commands(), key=lambda item: item[0])


@pytest.mark.parametrize("path", [path for path, _ in COMMANDS], ids=" ".join)
def test_help_shows_flags_without_a_value_placeholder(path: tuple[str, ...]) -> None:
    result = cli(None, *path, "--help", env=NARROW)
    assert result.exit_code == 0, result.output
    assert "<bool>" not in result.stdout
    for line in result.stdout.splitlines():
        if "--verbose" in line:
            assert "<int>" not in line


@pytest.mark.parametrize("path", [path for path, _ in COMMANDS], ids=" ".join)
def test_every_option_and_argument_is_described(path: tuple[str, ...]) -> None:
    command = dict(COMMANDS)[path]
    undescribed = [
        param.name for param in command.params if not (getattr(param, "help", None) or "").strip()
    ]
    assert undescribed == []


def test_verbose_is_a_counted_flag(tmp_path: Path) -> None:
    missing = str(tmp_path / "missing.db")  # a failing command logs its failure at DEBUG
    assert "DEBUG" in cli(missing, "-vv", "stats").stderr
    assert "DEBUG" in cli(missing, "--verbose", "--verbose", "stats").stderr
    assert "DEBUG" not in cli(missing, "-v", "stats").stderr
    refused = cli(None, "--verbose", "2", "stats")
    assert refused.exit_code == 2  # a count, not a number: "2" is no command
    assert "-vv" in cli(None, "--help").stdout


def test_a_long_session_key_is_listed_on_one_line(database: str) -> None:
    key = "agent:main:" + "k" * 49
    assert len(key) == 60

    async def seed() -> None:
        async with opened(database) as manager:
            await manager.get_or_create(key)
            await manager.get_or_create("agent:main:short")
            await manager.update(key, model="a-model-name-long-enough-to-crowd-the-table-2026")

    run(seed())
    listed = cli(database, "sessions", "list", env=NARROW)
    assert listed.exit_code == 0, listed.output
    lines = listed.stdout.splitlines()
    assert [line for line in lines if key in line] and lines[0].startswith("key")
    assert any(line.startswith("agent:main:short ") for line in lines)


def test_stats_on_an_empty_store_prints_no_empty_parentheses(database: str) -> None:
    result = cli(database, "stats")
    assert result.exit_code == 0, result.output
    assert "()" not in result.stdout
    assert "summaries:         0\n" in result.stdout
