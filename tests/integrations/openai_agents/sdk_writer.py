"""A writer process for the two-process tests: ``python -m
tests.integrations.openai_agents.sdk_writer TARGET SESSION_ID NAME TURNS``, optionally with
``OPENSQUILLA_TEST_CLOCK_OFFSET_MS`` (its wall clock stepped, as the store reads it). Once
its session is connected it prints ``ready`` and waits for a line on stdin (the test's
barrier), then adds ``TURNS`` turns of 4 items (``NAME-<turn>-<i>``), one ``add_items``
each, through an ``OpenSquillaSession`` built from the DSN."""

from __future__ import annotations

import asyncio
import os
import sys

from opensquilla.session.integrations.openai_agents import OpenSquillaSession
from opensquilla.session.models import messages
from opensquilla.session.support import clock

OFFSET_ENV = "OPENSQUILLA_TEST_CLOCK_OFFSET_MS"


def turn(name: str, number: int) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"{name}-{number}-{i}"} for i in range(4)]


async def main(target: str, session_id: str, name: str, turns: int) -> None:
    offset = int(os.environ.get(OFFSET_ENV, "0"))
    real = clock.now_ms
    setattr(messages, "now_ms", lambda: real() + offset)  # noqa: B010 (a stepped clock)
    async with OpenSquillaSession(session_id, target) as session:
        await session.get_items(limit=1)  # connected
        print("ready", flush=True)
        await asyncio.to_thread(sys.stdin.readline)
        for number in range(turns):
            await session.add_items(turn(name, number))  # type: ignore[arg-type]


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))
