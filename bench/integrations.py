"""The framework integrations against the frameworks' own backends (issue 29), one run.

    python bench/integrations.py --backend sqlite|postgres [-n 200] [--json PATH]

Runs ``bench/integrations_openai.py`` (``OpenSquillaSession`` beside ``SQLiteSession`` and,
on PostgreSQL, ``SQLAlchemySession``) and ``bench/integrations_adk.py``
(``OpenSquillaSessionService`` beside ``DatabaseSessionService``) on the same backend, one
after the other, and prints each ratio beside its target. Needs the frameworks:
``pip install -e '.[bench]'``. Times are p50 milliseconds of interleaved rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import Any

import integrations_adk
import integrations_openai
from rich.console import Console
from rich.table import Table

# (result key, what it is, target, the backend it applies to: None for both)
TARGETS: tuple[tuple[str, str, float, str | None], ...] = (
    ("add_items_5_over_sqlite_session", "OpenAI add_items(5) / SQLiteSession", 1.5, "sqlite"),
    (
        "add_items_5_over_sqlalchemy_session",
        "OpenAI add_items(5) / SQLAlchemySession",
        0.5,
        "postgres",
    ),
    ("get_items_1000_over_sqlite_session", "OpenAI get_items(1000) / SQLiteSession", 1.5, None),
    ("append_event_ours_over_adk", "ADK append_event / DatabaseSessionService", 0.5, None),
    (
        "get_session_1000_ours_over_adk",
        "ADK get_session(1000) / DatabaseSessionService",
        1.0,
        None,
    ),
)


async def run(backend: str, n: int) -> dict[str, float]:
    results = await integrations_openai.run(backend, n)
    results.update(await integrations_adk.run(backend, n))
    return results


def table(backend: str, results: dict[str, float]) -> Table:
    view = Table(title=f"framework integrations on {backend}: ratio to the framework's backend")
    for column in ("measure", "ratio", "target", "met"):
        view.add_column(column, justify="left" if column == "measure" else "right")
    for key, label, target, only in TARGETS:
        if only is not None and only != backend:
            continue
        value = results[key]
        view.add_row(label, f"{value:.2f}x", f"<= {target}x", "yes" if value <= target else "NO")
    return view


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("-n", type=int, default=200)
    parser.add_argument("--json", type=Path, help="where to write the figures")
    args = parser.parse_args()
    results: dict[str, Any] = asyncio.run(run(args.backend, args.n))
    console = Console()
    console.print(table(args.backend, results))
    for name, value in results.items():
        console.print(f"{name}: {value:.3f}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
