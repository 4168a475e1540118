"""``record_usage`` against one append, in interleaved same-run rounds (issue 28, item 7).

    python bench/primitives_usage.py --backend sqlite|postgres [--repeat 400]

``run(backend)`` returns the p50 (ms) of a warm ``record_usage`` (one fenced ``UPDATE ...
RETURNING`` of increments, in a write transaction), of a warm ``append_message`` (the
append's one statement in autocommit) and their ratio, each measured in rounds that call
both once in turn (``common.interleaved_p50``), so a load that comes and goes hits them
alike.
"""

from __future__ import annotations

import argparse
import asyncio
import json

from common import MESSAGE, fresh_target, interleaved_p50

from opensquilla.session import SessionManager, SessionStorage

KEY = "agent:main:bench-usage"


async def run(backend: str, repeat: int = 400) -> dict[str, float]:
    async with fresh_target(backend) as target, SessionStorage(target) as storage:
        manager = SessionManager(storage, inject_time_prefix=False)
        await manager.create(KEY)
        await manager.append_message(KEY, "user", MESSAGE)  # warm: cache, SQLite's view

        async def usage() -> object:
            return await manager.record_usage(
                KEY,
                input_tokens=1200,
                output_tokens=300,
                cache_read=800,
                cost_usd=0.0042,
                cost_source="provider_billed",
            )

        async def append() -> object:
            return await manager.append_message(KEY, "assistant", MESSAGE, token_count=50)

        await interleaved_p50({"usage": usage, "append": append}, 20)  # warm-up rounds
        p50 = await interleaved_p50({"usage": usage, "append": append}, repeat)
    return {
        "record_usage_p50_ms": p50["usage"],
        "append_p50_ms": p50["append"],
        "record_usage_over_append": p50["usage"] / p50["append"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--repeat", type=int, default=400)
    args = parser.parse_args()
    figures = asyncio.run(run(args.backend, args.repeat))
    print(json.dumps({"backend": args.backend, **figures}, indent=2))


if __name__ == "__main__":
    main()
