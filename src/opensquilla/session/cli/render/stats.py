"""The ``stats`` command's output: row counts of the store and its reset archive files."""

from __future__ import annotations

from typing import Any

from ...usecases.overview import StoreStats
from . import View
from .repair import print_archives
from .text import field, out, visible


def _stats_data(result: StoreStats) -> dict[str, Any]:
    counts = result.counts
    return {
        "sessions": counts.sessions,
        "entries": {"live": counts.live_entries, "archived": counts.archived_entries},
        "archive": {
            "entries": counts.archived_entries,
            "content_chars": counts.archived_content_chars,
        },
        "summaries_by_flush_status": counts.summaries_by_flush_status,
        "degraded_queue": counts.degraded_queue,
        "context_states": {"total": counts.context_states, "valid": counts.valid_context_states},
        "reset_archives": {
            "store": result.reset_archive_store,
            "directory": str(result.reset_archive_directory),
            "files": result.reset_archive_files,
            "bytes": result.reset_archive_bytes,
            "other_files": result.other_reset_archive_files,
            "database": {
                "archives": result.reset_archive_rows,
                "bytes": result.reset_archive_row_bytes,
            },
            **result.archives.as_json(),
        },
    }


def _print_stats(result: StoreStats) -> None:
    counts = result.counts
    out.print(f"sessions:          {counts.sessions}")
    out.print(f"entries:           {counts.live_entries} live, {counts.archived_entries} archived")
    out.print(f"archive size:      {counts.archived_content_chars} characters of content")
    by_status = counts.summaries_by_flush_status
    statuses = ", ".join(f"{field(k)}={v}" for k, v in by_status.items())
    out.print(
        f"summaries:         {sum(by_status.values())}" + (f" ({statuses})" if statuses else "")
    )
    out.print(f"repair queue:      {counts.degraded_queue}")
    out.print(f"context states:    {counts.context_states} ({counts.valid_context_states} valid)")
    others = result.other_reset_archive_files
    out.print(
        f"reset archives:    {result.reset_archive_files} file(s), "
        f"{result.reset_archive_bytes} bytes in "
        f"{visible(result.reset_archive_directory, None, one_line=True)}"
        + (f" (and {others} file(s) of other stores or older releases)" if others else "")
    )
    where = "the database" if result.reset_archive_store == "database" else "files"
    out.print(
        f"                   {result.reset_archive_rows} in the database, "
        f"{result.reset_archive_row_bytes} bytes (new ones go to {where})"
    )
    print_archives(result.archives)


STATS: View[StoreStats] = View(_stats_data, _print_stats)
