"""ADK's own ``Runner`` end to end on this store, with a scripted model (no network): 20+
turns with tool calls and their results, a compaction in the middle, a reset, and the agent
still answering from its history. The same scenario runs on ADK's ``SqliteSessionService``
as the control, so that a difference is ours."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from google.adk.runners import Runner
from google.adk.sessions import BaseSessionService
from google.adk.sessions.sqlite_session_service import SqliteSessionService
from google.genai import types

from opensquilla.session import SessionManager, SessionStorage
from opensquilla.session.integrations.google_adk import OpenSquillaSessionService

from .scripted import ScriptedModel, scripted_agent

APP, USER, SID = "calc", "ana", "chat"
BEFORE = [t for i in range(9) for t in (f"add {i} {i + 1}", f"hello {i}")]  # 18 turns
MIDDLE = ["remember blue", "add 100 1", "recall", "hello again"]
AFTER_RESET = ["recall", "add 2 2", "recall"]


@dataclass
class Run:
    answers: list[str] = field(default_factory=list)
    turns: int = 0
    compacted_at: int = 0  # how many model requests had been made then
    reset_at: int = 0


async def turn(runner: Runner, text: str, run: Run) -> None:
    message = types.Content(role="user", parts=[types.Part(text=text)])
    final = ""
    async for event in runner.run_async(user_id=USER, session_id=SID, new_message=message):
        parts = event.content.parts if event.content else None
        if parts and parts[-1].text:
            final = parts[-1].text
    run.answers.append(final)
    run.turns += 1


async def scenario(
    service: BaseSessionService,
    compact: Callable[[], Awaitable[None]],
    reset: Callable[[], Awaitable[None]],
) -> tuple[Run, ScriptedModel]:
    agent, model = scripted_agent()
    runner = Runner(agent=agent, app_name=APP, session_service=service)
    await service.create_session(app_name=APP, user_id=USER, session_id=SID)
    run = Run()
    for text in BEFORE:
        await turn(runner, text, run)
    await compact()
    run.compacted_at = len(model.requests)
    for text in MIDDLE:
        await turn(runner, text, run)
    await reset()
    run.reset_at = len(model.requests)
    for text in AFTER_RESET:
        await turn(runner, text, run)
    return run, model


def expected_answers(recall_turns: int) -> list[str]:
    before = [a for i in range(9) for a in (f"sum={2 * i + 1}", f"echo:hello {i}")]
    middle = ["ok", "sum=101", f"last=sum=101 turns={recall_turns}", "echo:hello again"]
    return [*before, *middle, "last=None turns=0", "sum=4", "last=sum=4 turns=1"]


async def test_runner_on_our_store(storage: SessionStorage, manager: SessionManager) -> None:
    service = OpenSquillaSessionService(storage)
    key = service.session_key(app_name=APP, user_id=USER, session_id=SID)
    summaries: list[str] = []

    async def compact() -> None:
        result = await manager.compact_with_result(key, 400)
        assert result.removed_count > 0, result.skip_reason
        summaries.append(result.summary)
        session = await service.get_session(app_name=APP, user_id=USER, session_id=SID)
        assert session is not None
        head = session.events[0]
        assert head.actions.compaction is not None
        assert head.actions.compaction.compacted_content.parts[0].text == result.summary  # type: ignore[index]
        # The kept events are the newest ones, whole: a call never without its answer.
        calls = {p.function_call.id for e in session.events for p in _parts(e) if p.function_call}
        answers = {
            p.function_response.id for e in session.events for p in _parts(e) if p.function_response
        }
        assert calls == answers

    async def reset() -> None:
        await manager.reset(key)

    run, model = await scenario(service, compact, reset)
    assert run.turns == 25
    # After the compaction the model is sent the summary instead of the folded turns, and
    # still answers from what it kept (the last sum), seeing fewer user turns than the control.
    with_summary = [i for i, texts in enumerate(model.requests) if summaries[0] in texts]
    assert with_summary == list(range(run.compacted_at, run.reset_at))
    recall = run.answers[len(BEFORE) + 2]
    kept_turns = int(recall.rsplit("turns=", 1)[1])
    assert 0 < kept_turns < len(BEFORE) + 2
    assert run.answers == expected_answers(kept_turns)
    # The user state set before the reset survives it (user scope), the session's does not.
    session = await service.get_session(app_name=APP, user_id=USER, session_id=SID)
    assert session is not None and session.state == {"user:fact": "blue"}
    assert len(session.events) == 2 + 4 + 2  # "recall", "add 2 2" (4 events), "recall"
    assert len(await manager.list_session_archives(key)) >= 0


async def test_control_runner_on_adk_sqlite(tmp_path: Path) -> None:
    service = SqliteSessionService(str(tmp_path / "adk.db"))

    async def compact() -> None:  # ADK's store has no compaction: nothing is folded
        return None

    async def reset() -> None:  # ADK's nearest: a new session under the same id
        await service.delete_session(app_name=APP, user_id=USER, session_id=SID)
        await service.create_session(app_name=APP, user_id=USER, session_id=SID)

    run, _ = await scenario(service, compact, reset)
    assert run.answers == expected_answers(len(BEFORE) + 2)
    session = await service.get_session(app_name=APP, user_id=USER, session_id=SID)
    assert session is not None and session.state == {"user:fact": "blue"}
    assert len(session.events) == 2 + 4 + 2
    await service.close()


def _parts(event: object) -> list[types.Part]:
    content = getattr(event, "content", None)
    return list(content.parts or []) if content is not None else []
