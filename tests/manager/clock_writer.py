"""A writer process whose wall clock is stepped back (issue 28's order test): run as
``python -m tests.manager.clock_writer TARGET KEY CONTENT...`` with
``OPENSQUILLA_TEST_CLOCK_OFFSET_MS`` (e.g. ``-5000``); appends each content as a user
message (one ``append_message`` each, then one ``append_messages`` of all of them) and
prints the entries written as JSON lines."""

from __future__ import annotations

import asyncio
import json
import os
import sys

from opensquilla.session import SessionManager, SessionStorage
from opensquilla.session.models import messages
from opensquilla.session.support import clock

OFFSET_ENV = "OPENSQUILLA_TEST_CLOCK_OFFSET_MS"


async def main(target: str, key: str, contents: list[str]) -> None:
    offset = int(os.environ.get(OFFSET_ENV, "0"))
    real = clock.now_ms
    setattr(messages, "now_ms", lambda: real() + offset)  # noqa: B010 (a stepped clock)
    async with SessionStorage(target) as storage:
        manager = SessionManager(storage, inject_time_prefix=False)
        written = [await manager.append_message(key, "user", text) for text in contents]
        written += await manager.append_messages(
            key, [{"role": "user", "content": f"batch {text}"} for text in contents]
        )
        for entry in written:
            print(json.dumps({"id": entry.id, "content": entry.content, "at": entry.created_at}))
        print(json.dumps({"clock": real() + offset}))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3:]))
