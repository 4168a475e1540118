"""Google ADK on this store against ADK's own ``DatabaseSessionService``, same backend.

    python bench/integrations_adk.py --backend sqlite|postgres [-n 200]

Two workloads, each on a fresh database per store, measured in interleaved rounds
(``common.interleaved_p50``: a load that comes and goes hits both alike):

- ``append_event`` of one user event (text) through one session object, each store's;
- ``get_session`` of a session holding 1,000 events (half user text, half model text).

Targets (issue 29): ``append_event`` <= 0.5x ``DatabaseSessionService``; ``get_session``
of 1,000 events <= 1x it.

The floor of ours, measured in the same rounds: ``append_event`` is two store calls (the
revision's compare-and-set ``update_state``, a read and a conditional write in autocommit,
then ``append_message``, one statement; the store has no call that does both in one), so
``floor_update_state`` and ``floor_append_message`` (the same two calls on another session,
without the integration) show what the core costs.
"""

from __future__ import annotations

import uuid
from typing import Any

from common import MESSAGE, fresh_target, interleaved_p50, script_main

from opensquilla.session import SessionStorage
from opensquilla.session.integrations.google_adk import OpenSquillaSessionService

APP, USER = "bench", "u"


def _async_url(target: str) -> str:
    if target.startswith("postgresql"):
        return target.replace("postgresql://", "postgresql+asyncpg://", 1)
    return f"sqlite+aiosqlite:///{target}"


def _event(author: str, text: str) -> Any:
    from google.adk.events import Event
    from google.genai import types

    role = "user" if author == "user" else "model"
    return Event(
        author=author,
        invocation_id=uuid.uuid4().hex,
        content=types.Content(role=role, parts=[types.Part(text=text)]),
    )


async def _fill(service: Any, session: Any, count: int) -> None:
    for i in range(count):
        await service.append_event(session, _event("user" if i % 2 == 0 else "agent", MESSAGE))


async def run(backend: str, n: int) -> dict[str, float]:
    """p50 ms of ``append_event`` and of ``get_session`` (1,000 events) for both stores,
    and ours over theirs."""
    from google.adk.sessions import DatabaseSessionService

    async with fresh_target(backend) as ours_target, fresh_target(backend) as adk_target:
        storage = SessionStorage(ours_target)
        await storage.connect()
        ours = OpenSquillaSessionService(storage)
        theirs = DatabaseSessionService(db_url=_async_url(adk_target))
        try:
            services = {"ours": ours, "adk": theirs}
            writing = {
                name: await service.create_session(app_name=APP, user_id=USER, session_id="w")
                for name, service in services.items()
            }
            reading = {
                name: await service.create_session(app_name=APP, user_id=USER, session_id="r")
                for name, service in services.items()
            }
            for name, service in services.items():
                await _fill(service, reading[name], 1000)

            def appender(name: str) -> Any:
                service, session = services[name], writing[name]
                return lambda: service.append_event(session, _event("user", MESSAGE))

            manager = await ours.manager()
            floor_key = ours.session_key(app_name=APP, user_id=USER, session_id="floor")
            await ours.create_session(app_name=APP, user_id=USER, session_id="floor")
            revision = [(await manager.get_state(floor_key)).revision]

            async def floor_update_state() -> None:
                revision[0] = await manager.update_state(
                    floor_key, {}, expected_revision=revision[0]
                )

            metadata = {"adk_event": _event("user", MESSAGE).model_dump_json(exclude_none=True)}

            async def floor_append_message() -> None:
                await manager.append_message(floor_key, "user", MESSAGE, metadata=metadata)

            def reader(name: str) -> Any:
                service = services[name]
                return lambda: service.get_session(app_name=APP, user_id=USER, session_id="r")

            appends = {name: appender(name) for name in services}
            appends["floor_update_state"] = floor_update_state
            appends["floor_append_message"] = floor_append_message
            await interleaved_p50(appends, min(30, n))  # warm: statement caches, the pool
            append_ms = await interleaved_p50(appends, n)
            reads = {name: reader(name) for name in services}
            await interleaved_p50(reads, 2)
            read_ms = await interleaved_p50(reads, max(10, n // 10))
        finally:
            await theirs.close()
            await storage.close()
    return {
        "ours_append_event_p50_ms": append_ms["ours"],
        "adk_append_event_p50_ms": append_ms["adk"],
        "append_event_ours_over_adk": append_ms["ours"] / append_ms["adk"],
        "floor_update_state_p50_ms": append_ms["floor_update_state"],
        "floor_append_message_p50_ms": append_ms["floor_append_message"],
        "floor_one_transaction_over_adk": append_ms["floor_append_message"] / append_ms["adk"],
        "ours_get_session_1000_p50_ms": read_ms["ours"],
        "adk_get_session_1000_p50_ms": read_ms["adk"],
        "get_session_1000_ours_over_adk": read_ms["ours"] / read_ms["adk"],
    }


if __name__ == "__main__":
    script_main(__doc__, run, 200)
