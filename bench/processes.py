"""Writers in several processes: throughput, its scaling, and appends per CPU-second.

    python bench/processes.py --backend sqlite|postgres [--processes 1,2,4,8] [--writers 4]
                              [--seconds 5] [--stores ours,openai_sqlite,...] [--peers] [--json]
                              [--rounds 1] [--profile PREFIX]

Part of ``bench/run.py --processes 1,2,4,8`` (its table and ``processes`` in its JSON).
Gateways scale with worker processes, not threads: for each store and each process count N,
N processes (``multiprocessing``, spawn) of ``--writers`` asyncio tasks each append
200-character messages, one call per message, for ``--seconds``, in two shapes: ``own``
(every writer on its own session) and ``hot`` (every writer of every process on ONE
session). Each scenario gets a fresh database. A process connects, makes its first appends
(warm-up: pools, statement caches), waits on a barrier with the others, and only then does
the timed window start; the window ends when its last process's last append returns.

The stores: ours (``SessionManager.append_message`` on the DSN), and with ``--peers``
OpenAI Agents ``SQLiteSession`` (SQLite only) and ``SQLAlchemySession`` (one engine per
process) and Google ADK ``DatabaseSessionService`` (one service per process; ADK refuses an
append to a session another writer has changed since it was loaded, ``StaleSessionError``:
the writer then reloads the session with no events, as ADK's message says, and tries
again; the refusals are counted as ``stale_retries``, not as errors). An append that
raises is counted by exception type and the writer goes on; nothing is retried otherwise.

Reported per store, shape and N: appends/s (successful timed appends over the wall-clock
window), the ratio to N=1, and appends per CPU-second: appends / (client CPU + server
CPU). Client CPU is the sum of the worker processes' user+system time over their timed
window (``getrusage``, every thread; on SQLite the database engine runs there too). Server
CPU (PostgreSQL, when the server runs on this machine) is read from ``/proc/<pid>/stat``
before and after the window: the backends serving the bench database
(``pg_stat_activity``) plus the server's own processes (postmaster, walwriter,
checkpointer, background writer, autovacuum), which every store's writes keep busy; the
CPU of every ``postgres`` process, other databases' backends included, is in
``server_all_cpu_s`` (on a shared machine it includes other people's work). Afterwards the
rows are counted: ``lost`` = successful appends (warm-up included) not found in the
database, ``extra`` = rows found beyond them (an append that raised but committed); ours
also checks each session's ``total_tokens``.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import multiprocessing
import os
import queue
import resource
import statistics
import sys
import time
import traceback
from collections import Counter
from typing import Any

import proc_stores
from common import fresh_target

SHAPES = ("own", "hot")
WARMUP = 5  # appends per writer before the barrier
BARRIER_TIMEOUT = 600.0


def stores_for(backend: str, peers: bool) -> list[str]:
    if not peers:
        return ["ours"]
    if backend == "sqlite":
        return ["ours", "openai_sqlite", "openai_sqlalchemy", "adk"]
    return ["ours", "openai_sqlalchemy", "adk"]


# -- worker process ------------------------------------------------------------------------


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _work(
    spec: dict[str, Any], ready: Any, go: Any, done: Any, measured: Any
) -> dict[str, Any]:
    keys: list[str] = spec["keys"]
    store = await proc_stores.open_store(spec["store"], spec["target"], keys)
    ok: Counter[str] = Counter()  # successful appends per key, warm-up included
    timed_ok = 0
    errors: Counter[str] = Counter()
    try:

        async def writer(key: str, deadline: float | None) -> int:
            done_here = 0
            count = 0
            while (count < WARMUP) if deadline is None else (time.monotonic() < deadline):
                count += 1
                try:
                    await store.append(key)
                except Exception as exc:
                    errors[proc_stores.error_name(exc)] += 1
                    continue
                ok[key] += 1
                done_here += 1
            return done_here

        await asyncio.gather(*(writer(key, None) for key in keys))
        warm_errors = sum(errors.values())
        ready.wait(BARRIER_TIMEOUT)
        go.wait(BARRIER_TIMEOUT)
        profile = cProfile.Profile(time.thread_time) if spec.get("profile") else None
        start, cpu0 = time.monotonic(), _cpu_seconds()
        if profile is not None:
            profile.enable()
        counts = await asyncio.gather(*(writer(key, start + spec["seconds"]) for key in keys))
        if profile is not None:
            profile.disable()
        end, cpu1 = time.monotonic(), _cpu_seconds()
        if profile is not None:
            profile.dump_stats(f"{spec['profile']}.{os.getpid()}")
        timed_ok = sum(counts)
        done.wait(BARRIER_TIMEOUT)
        measured.wait(BARRIER_TIMEOUT)  # the connections stay open until the server is read
        return {
            "start": start,
            "end": end,
            "cpu_s": cpu1 - cpu0,
            "timed_ok": timed_ok,
            "ok_by_key": dict(ok),
            "errors": dict(errors),
            "warmup_errors": warm_errors,
            "stale_retries": store.stale_retries,
        }
    finally:
        await store.close()


def _worker(spec: dict[str, Any], ready: Any, go: Any, done: Any, measured: Any, out: Any) -> None:
    try:
        out.put(asyncio.run(_work(spec, ready, go, done, measured)))
    except BaseException:
        ready.abort()
        done.abort()
        out.put({"failure": traceback.format_exc()})


# -- one scenario ---------------------------------------------------------------------------


def _keys(shape: str, processes: int, writers: int) -> list[list[str]]:
    if shape == "hot":
        return [["agent:main:hot"] * writers for _ in range(processes)]
    return [[f"agent:main:p{p}w{w}" for w in range(writers)] for p in range(processes)]


async def scenario(
    backend: str,
    store: str,
    shape: str,
    processes: int,
    writers: int,
    seconds: float,
    profile: str | None = None,
) -> dict[str, Any]:
    """One fresh database, ``processes`` worker processes; the row of the report."""
    keys = _keys(shape, processes, writers)
    distinct = sorted({k for per in keys for k in per})
    async with fresh_target(backend) as target:
        seeded = await proc_stores.prepare(store, target, distinct)
        context = multiprocessing.get_context("spawn")
        ready, done = context.Barrier(processes + 1), context.Barrier(processes + 1)
        go, measured, out = context.Event(), context.Event(), context.Queue()
        workers = [
            context.Process(
                target=_worker,
                args=(
                    {
                        "store": store,
                        "target": target,
                        "keys": keys[p],
                        "seconds": seconds,
                        "profile": profile,
                    },
                    ready,
                    go,
                    done,
                    measured,
                    out,
                ),
                daemon=True,
            )
            for p in range(processes)
        ]
        for worker in workers:
            worker.start()
        server = proc_stores.ServerCpu(target) if backend == "postgres" else None
        failure = None
        server_cpu = None
        try:
            await asyncio.to_thread(ready.wait, BARRIER_TIMEOUT)
            if server is not None:
                await server.start()
            go.set()
            await asyncio.to_thread(done.wait, BARRIER_TIMEOUT)
            if server is not None:
                server_cpu = await server.stop()
        except Exception:
            failure = "a worker failed before the window ended"
        except BaseException:  # interrupted: free the threads and the workers, then go
            ready.abort()
            done.abort()
            for worker in workers:
                worker.kill()
            raise
        finally:
            measured.set()
        results = []
        for _ in workers:
            try:
                results.append(await asyncio.to_thread(out.get, True, BARRIER_TIMEOUT))
            except queue.Empty:
                break
        for worker in workers:
            await asyncio.to_thread(worker.join, 60)
            if worker.is_alive():
                worker.kill()
        failures = [r["failure"] for r in results if "failure" in r]
        if failure or failures or len(results) < processes:
            detail = failures[0][-2000:] if failures else "a worker did not report"
            return {"store": store, "shape": shape, "processes": processes, "failure": detail}
        expected: Counter[str] = Counter(seeded)
        for result in results:
            expected.update(result["ok_by_key"])
        found, token_mismatches = await proc_stores.count_rows(store, target, distinct)
    wall = max(r["end"] for r in results) - min(r["start"] for r in results)
    appends = sum(r["timed_ok"] for r in results)
    errors: Counter[str] = Counter()
    for result in results:
        errors.update(result["errors"])
    client_cpu = sum(r["cpu_s"] for r in results)
    row: dict[str, Any] = {
        "store": store,
        "shape": shape,
        "processes": processes,
        "writers": processes * writers,
        "appends": appends,
        "per_s": appends / wall if wall else 0.0,
        "wall_s": wall,
        "client_cpu_s": client_cpu,
        "errors": sum(errors.values()),
        "error_types": dict(errors),
        "warmup_errors": sum(r["warmup_errors"] for r in results),
        "stale_retries": sum(r["stale_retries"] for r in results),
        "lost": sum(max(0, n - found.get(k, 0)) for k, n in expected.items()),
        "extra": sum(max(0, found.get(k, 0) - expected[k]) for k in distinct),
    }
    if token_mismatches is not None:
        row["token_mismatches"] = token_mismatches
    if server_cpu is not None:
        row.update(server_cpu)
    cpu = client_cpu + (server_cpu or {}).get("server_cpu_s", 0.0)
    row["appends_per_cpu_s"] = appends / cpu if cpu else 0.0
    return row


# -- the scenario, the table, the command line ---------------------------------------------


async def run(
    backend: str,
    counts: list[int],
    *,
    peers: bool,
    writers: int = 4,
    seconds: float = 5.0,
    stores: list[str] | None = None,
    echo: bool = True,
    profile: str | None = None,
    rounds: int = 1,
) -> list[dict[str, Any]]:
    """Every store, shape and process count, ``rounds`` times, the stores interleaved (the
    stores of one shape and count run one after another, so a passing load hits them
    alike). A row per store, shape and count: the medians over the rounds, the spread of
    the throughput (``per_s_min``, ``per_s_max``), the sums of errors and losses, ``vs_1``
    (median throughput over that of one process, same store and shape) and ``runs``, the
    rounds' own rows."""
    runs: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    names = stores or stores_for(backend, peers)
    for index in range(rounds):
        for n in counts:
            for shape in SHAPES:
                for store in names:
                    path = f"{profile}.{store}.{shape}.{n}.{index}" if profile else None
                    row = await scenario(backend, store, shape, n, writers, seconds, path)
                    runs.setdefault((store, shape, n), []).append(row)
                    if echo:
                        print(_line(row), file=sys.stderr, flush=True)
    rows = [
        _summary(runs[(store, shape, n)]) for store in names for shape in SHAPES for n in counts
    ]
    base = {(r["store"], r["shape"]): r for r in rows if r["processes"] == 1 and "per_s" in r}
    for row in rows:
        one = base.get((row["store"], row["shape"]))
        if one is not None and "per_s" in row and one["per_s"]:
            row["vs_1"] = row["per_s"] / one["per_s"]
    return rows


MEDIANS = ("per_s", "wall_s", "client_cpu_s", "appends_per_cpu_s", "appends")
MEDIANS_PG = ("backends_cpu_s", "server_cpu_s", "server_all_cpu_s")
SUMS = ("errors", "warmup_errors", "stale_retries", "lost", "extra")


def _summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    first = runs[0]
    row: dict[str, Any] = {k: first[k] for k in ("store", "shape", "processes")}
    good = [r for r in runs if "failure" not in r]
    if not good:
        return {**row, "failure": first["failure"], "runs": runs}
    row["writers"] = good[0]["writers"]
    for name in MEDIANS + MEDIANS_PG:
        values = [r[name] for r in good if r.get(name) is not None]
        if values:
            row[name] = statistics.median(values)
    row["per_s_min"] = min(r["per_s"] for r in good)
    row["per_s_max"] = max(r["per_s"] for r in good)
    for name in SUMS:
        row[name] = sum(r[name] for r in good)
    errors: Counter[str] = Counter()
    for r in good:
        errors.update(r["error_types"])
    row["error_types"] = dict(errors)
    if "token_mismatches" in first:
        row["token_mismatches"] = sorted({k for r in good for k in r["token_mismatches"]})
    row["failed_rounds"] = len(runs) - len(good)
    row["runs"] = runs
    return row


def _line(row: dict[str, Any]) -> str:
    head = f"processes: {row['store']} {row['shape']} x{row['processes']}"
    if "failure" in row:
        return f"{head} FAILED {row['failure'].strip().splitlines()[-1]}"
    return (
        f"{head} {row['per_s']:.0f}/s, {row['appends_per_cpu_s']:.0f}/cpu-s, "
        f"errors {row['errors']}, lost {row['lost']}"
    )


def table(rows: list[dict[str, Any]]) -> Any:
    from rich.table import Table

    out = Table(
        title="writers in N processes: appends/s over the window, per CPU-second "
        "(client + server); medians of the rounds, CPU in seconds"
    )
    names = ("store", "shape", "N", "/s", "min-max", "vs 1", "/CPU-s", "client s", "server s")
    for name in (*names, "errors", "stale", "lost/extra"):
        out.add_column(name, justify="left" if name in ("store", "shape") else "right")
    for row in rows:
        if "failure" in row:
            failed = row["failure"].strip().splitlines()[-1][:60]
            out.add_row(row["store"], row["shape"], str(row["processes"]), f"FAILED: {failed}")
            continue
        server = row.get("server_cpu_s")
        out.add_row(
            row["store"],
            row["shape"],
            str(row["processes"]),
            f"{row['per_s']:,.0f}",
            f"{row['per_s_min']:,.0f}-{row['per_s_max']:,.0f}",
            f"{row['vs_1']:.2f}" if "vs_1" in row else "-",
            f"{row['appends_per_cpu_s']:,.0f}",
            f"{row['client_cpu_s']:.2f}",
            "-" if server is None else f"{server:.2f}",
            str(row["errors"]),
            str(row["stale_retries"]),
            f"{row['lost']}/{row['extra']}",
        )
    return out


def counts_arg(text: str) -> list[int]:
    counts = [int(part) for part in text.split(",") if part.strip()]
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError("a list of process counts, e.g. 1,2,4,8")
    return counts


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``--processes`` (and its knobs) for ``bench/run.py``."""
    parser.add_argument(
        "--processes",
        type=counts_arg,
        metavar="1,2,4,8",
        help="also run writers in that many processes (bench/processes.py)",
    )
    parser.add_argument("--process-writers", type=int, default=4, help="writers per process")
    parser.add_argument(
        "--process-seconds", type=float, help="timed window per scenario (5; 1 with --quick)"
    )
    parser.add_argument("--process-rounds", type=int, default=1, help="repeat, interleaved")


async def from_run(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The scenario as ``bench/run.py`` runs it."""
    seconds = args.process_seconds or (1.0 if args.quick else 5.0)
    return await run(
        args.backend,
        args.processes,
        peers=args.peers,
        writers=args.process_writers,
        seconds=seconds,
        rounds=args.process_rounds,
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--processes", type=counts_arg, default=[1, 2, 4, 8])
    parser.add_argument("--writers", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--peers", action="store_true")
    parser.add_argument("--rounds", type=int, default=1, help="repeat, stores interleaved")
    parser.add_argument("--stores", help="comma-separated, instead of the --peers default")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    parser.add_argument(
        "--profile",
        metavar="PREFIX",
        help="cProfile (CPU time) each worker's timed window, event loop's thread, to PREFIX.*",
    )
    arguments = parser.parse_args()
    outcome = asyncio.run(
        run(
            arguments.backend,
            arguments.processes,
            peers=arguments.peers,
            writers=arguments.writers,
            seconds=arguments.seconds,
            stores=arguments.stores.split(",") if arguments.stores else None,
            profile=arguments.profile,
            rounds=arguments.rounds,
        )
    )
    if arguments.json:
        print(json.dumps(outcome, indent=2))
    else:
        from rich.console import Console

        Console().print(table(outcome))
