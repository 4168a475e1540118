"""opensquilla-session benchmark: ours beside the driver floor (and peers with --peers).

    python bench/run.py --backend sqlite|postgres [--quick] [--peers] [--json PATH]
                        [--processes 1,2,4,8 [--process-writers 4] [--process-seconds 5]
                         [--process-rounds 1]]

With ``--processes`` it also runs ``bench/processes.py``: writers in that many worker
processes (each its own session, and all on one hot session), throughput and appends per
CPU-second, ours and (with ``--peers``) the peers; ``processes`` in the JSON. Off by
default; with ``--quick`` its window is 1 second.

Prints a table and writes JSON (default bench/results/<backend>[-quick].json). Durability is
stated per row: our SQLite runs WAL + synchronous=FULL unless --synchronous says otherwise.
Postgres is the server at $BENCH_POSTGRES_URL (default the local one); every scenario gets a
fresh database. Times are medians or percentiles of wall-clock milliseconds on this machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import resource
import sys
import time
from pathlib import Path
from typing import Any

import floors
import ours
import primitives_listing
import primitives_usage
import primitives_writes
import processes
import search
from common import fresh_target
from rich.console import Console
from rich.table import Table

HERE = Path(__file__).resolve().parent


def sizes(quick: bool) -> dict[str, Any]:
    if quick:
        return {
            "appends": 300,
            "prefills": [0, 1_000],
            "reads": [1_000],
            "read_repeats": 5,
            "prefills_big": [],
            "transcript_api": [2_000],
            "compactions": [2_000],
            "forks": [2_000],
            "listings": [1_000],
            "retention": 2_000,
            "per_writer": 100,
            "creates": 200,
        }
    return {
        "appends": 5_000,
        "prefills": [0, 10_000, 100_000],
        "reads": [1_000, 10_000, 100_000],
        "read_repeats": 7,
        "prefills_big": [1_000_000],
        "transcript_api": [10_000, 100_000, 1_000_000],
        "compactions": [2_000, 20_000],
        "forks": [2_000, 20_000],
        "listings": [1_000, 10_000, 100_000],
        "retention": 100_000,
        "per_writer": 500,
        "creates": 1_000,
    }


async def floor_append(backend: str, n: int) -> dict[str, Any]:
    from opensquilla.session import SessionManager, SessionStorage

    out: dict[str, Any] = {}
    async with fresh_target(backend) as target:
        storage = SessionStorage(target)
        await storage.connect()
        node = await SessionManager(storage).create("agent:main:floor")
        await storage.close()
        if backend == "sqlite":
            full = await floors.sqlite_append(target, node.session_key, node.session_id, n, "FULL")
            normal = await floors.sqlite_append(
                target, node.session_key, node.session_id, n, "NORMAL"
            )
            out["floor_append_p50_ms"] = full.p50
            out["floor_append_normal_p50_ms"] = normal.p50
            one_hop = await floors.sqlite_one_hop_append(
                target, node.session_key, node.session_id, n
            )
            out["floor_append_one_hop_p50_ms"] = one_hop.p50
        else:
            timings = await floors.postgres_append(target, node.session_key, node.session_id, n)
            out["floor_append_p50_ms"] = timings.p50
    return out


async def main(args: argparse.Namespace) -> dict[str, Any]:
    backend = args.backend
    plan = sizes(args.quick)
    plan.update(search.plan(args.quick))
    report: dict[str, Any] = {
        "backend": backend,
        "quick": args.quick,
        "machine": f"{platform.node()} {platform.machine()} {platform.python_version()}",
        "durability": "WAL, synchronous=FULL"
        if backend == "sqlite"
        else "PostgreSQL defaults (fsync on, synchronous_commit on)",
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "results": {},
    }
    results = report["results"]
    results.update(await floor_append(backend, plan["appends"]))
    create = await ours.create(backend, plan["creates"])
    results["create_p50_ms"] = create.p50
    for prefill in plan["prefills"]:
        timings = await ours.append(backend, prefill, plan["appends"])
        results[f"append_{prefill}_p50_ms"] = timings.p50
        results[f"append_{prefill}_p99_ms"] = timings.p99
        results[f"append_{prefill}_per_s"] = timings.per_second
    for size in plan["reads"]:
        read = await ours.reads(backend, size, peers=args.peers, repeats=plan["read_repeats"])
        for name, value in read.items():
            results[f"read_{size}_{name}"] = value
    for size in plan["transcript_api"]:
        api = await ours.transcript_api(backend, size, repeats=21)
        for name, value in api.items():
            results[f"api_{size}_{name}"] = value
    for count in plan["prefills_big"]:
        results[f"prefill_{count}_half_archived_s"] = await ours.prefill(backend, count, count // 2)
    for size in plan["compactions"]:
        results[f"compact_{size}_ms"] = (await ours.compaction(backend, size))["ms"]
    for size in plan["forks"]:
        results[f"fork_{size}_ms"] = await ours.fork(backend, size)
    for count in plan["listings"]:
        results[f"list_50_of_{count}_ms"] = await ours.listing(backend, count)
    retention = await ours.retention(backend, plan["retention"])
    results[f"cap_{plan['retention']}_ms"] = retention["cap_ms"]
    results[f"prune_{plan['retention']}_ms"] = retention["prune_ms"]
    one = await ours.writers(backend, 1, plan["per_writer"])
    eight = await ours.writers(backend, 8, plan["per_writer"])
    results["writers_1_per_s"] = one
    results["writers_8_per_s"] = eight
    results["writers_8_vs_1"] = eight / one
    results.update(await search.run(backend, plan))
    # Issue 28's framework primitives, beside the rows above (same run, same machine).
    results.update(await primitives_writes.run(backend, 60 if args.quick else 600))
    results.update(await primitives_usage.run(backend, 40 if args.quick else 400))
    if not args.quick:  # the 100k-session store takes a while to fill
        results.update(await primitives_listing.run(backend))
    if args.peers:
        import peers

        results.update(await peers.run(backend, plan))
    if args.processes:
        report["processes"] = await processes.from_run(args)
    results["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return report


def show(report: dict[str, Any]) -> None:
    table = Table(
        title=f"opensquilla-session bench: {report['backend']}"
        f"{' (quick)' if report['quick'] else ''} on {report['machine']}"
    )
    table.add_column("measure")
    table.add_column("value", justify="right")
    for name, value in report["results"].items():
        table.add_row(name, f"{value:,.3f}" if isinstance(value, float) else str(value))
    Console().print(table)
    Console().print(read_table(report["results"]))
    if report.get("processes"):
        Console().print(processes.table(report["processes"]))
    Console().print(f"durability: {report['durability']}")


def read_table(results: dict[str, Any]) -> Table:
    """The read targets at a glance: per-message microseconds (medians of interleaved
    rounds) of our live transcript read, its driver floor over the same columns, and
    OpenAI Agents' SQLAlchemySession.get_items (with --peers), and the ratios."""
    table = Table(title="transcript read, µs per message")
    columns = ("ours", "floor", "ours/floor", "openai", "ours/openai", "peak MB")
    keys = ("us_per_msg", "floor_us_per_msg", "vs_floor", "openai_us_per_msg", "vs_openai")
    table.add_column("entries", justify="right")
    for column in columns:
        table.add_column(column, justify="right")
    sizes = sorted(int(name.split("_")[1]) for name in results if name.endswith("_vs_floor"))
    for size in sizes:
        cells = [results.get(f"read_{size}_{key}") for key in (*keys, "peak_mb")]
        table.add_row(f"{size:,}", *("-" if v is None else f"{v:,.2f}" for v in cells))
    return table


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--quick", action="store_true", help="small sizes (CI smoke test)")
    parser.add_argument("--peers", action="store_true", help="also run the peer stores")
    parser.add_argument("--json", type=Path, help="where to write the JSON report")
    processes.add_arguments(parser)
    arguments = parser.parse_args()
    outcome = asyncio.run(main(arguments))
    show(outcome)
    path = arguments.json or HERE / "results" / (
        f"{arguments.backend}{'-quick' if arguments.quick else ''}.json"
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(outcome, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {path}", file=sys.stderr)
