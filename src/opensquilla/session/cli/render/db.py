"""The ``db`` commands' output: schema revisions, the schema check, the history."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict

from ...usecases.overview import RevisionInfo, SchemaReport
from . import View
from .text import field, out, visible


def revisions(ids: Sequence[str], none: str = "base") -> str:
    """Revision ids as read from a database (a version table can hold anything)."""
    return field(", ".join(ids)) if ids else none


def _print_schema(report: SchemaReport) -> None:
    out.print(f"state: {field(report.state)}")
    out.print(f"database: {revisions(report.current, 'none')}")
    out.print(f"code:     {revisions(report.heads, 'none')}")
    out.print(f"layout:   {field(report.layout)}")
    for line in report.drift:
        out.print(f"  drift: {visible(line, one_line=True)}")


def _print_history(infos: list[RevisionInfo]) -> None:
    for info in infos:
        head = " (head)" if info.is_head else ""
        out.print(
            f"{field(info.down_revision or 'base')} -> {field(info.revision)}{head}: "
            f"{field(info.message)}"
        )


CURRENT: View[tuple[str, ...]] = View(
    lambda current: {"current": list(current)},
    lambda current: out.print(revisions(current, "none (an empty or unmigrated database)")),
)


def _schema_data(report: SchemaReport) -> dict[str, object]:
    return {
        "state": report.state,
        "ok": report.ok,
        "current": list(report.current),
        "heads": list(report.heads),
        "unknown": list(report.unknown),
        "drift": list(report.drift),
        "layout": report.layout,
    }


SCHEMA: View[SchemaReport] = View(_schema_data, _print_schema)


def _print_repaired(result: tuple[tuple[str, ...], SchemaReport]) -> None:
    repaired, report = result
    out.print(f"recreated: {revisions(repaired, 'nothing')}")
    _print_schema(report)


REPAIRED_SCHEMA: View[tuple[tuple[str, ...], SchemaReport]] = View(
    lambda result: {"repaired": list(result[0]), **_schema_data(result[1])},
    _print_repaired,
)
HISTORY: View[list[RevisionInfo]] = View(
    lambda infos: {"revisions": [asdict(info) for info in infos]}, _print_history
)
