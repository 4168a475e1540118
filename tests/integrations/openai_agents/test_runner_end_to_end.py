"""``agents.Runner`` end to end on ``OpenSquillaSession`` (both backends), and the same
scenario on the SDK's own ``SQLiteSession`` as the control: 24 turns with a tool call and
its result, a compaction in the middle (ours), a clear (ours: a reset), and the agent still
answering from its history. The answers must be the control's, turn for turn."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from agents import Runner
from agents.memory import SQLiteSession

from opensquilla.session import SessionManager, SessionStorage
from opensquilla.session.integrations.openai_agents import OpenSquillaSession

from .scripted import PADDING, RememberingSummarizer, ScriptedModel, scripted_agent

EXPECTED = [
    *(f"noted w{i}" for i in range(1, 9)),
    "sum 5",
    *(f"noted w{i}" for i in range(9, 12)),
    "recall: " + " ".join(f"w{i}" for i in range(1, 12)),
    *(f"noted w{i}" for i in range(12, 18)),
    "sum 30",
    "recall: " + " ".join(f"w{i}" for i in range(1, 18)),
    "noted z1",
    "recall: z1",
]


def _first_recall(model: ScriptedModel) -> int:
    return next(i for i, items in enumerate(model.inputs) if items[-1].get("content") == "recall")


async def _scenario(session: Any, compact: Any) -> tuple[list[str], ScriptedModel]:
    model = ScriptedModel()
    agent = scripted_agent(model)
    answers: list[str] = []

    async def turn(text: str) -> None:
        result = await Runner.run(agent, text, session=session)
        answers.append(str(result.final_output))

    for i in range(1, 9):
        await turn(f"remember w{i}{PADDING}")
    await turn("add 2 3")
    for i in range(9, 12):
        await turn(f"remember w{i}{PADDING}")
    await compact()
    await turn("recall")
    for i in range(12, 18):
        await turn(f"remember w{i}{PADDING}")
    await turn("add 10 20")
    await turn("recall")
    await session.clear_session()
    await turn(f"remember z1{PADDING}")
    await turn("recall")
    return answers, model


async def test_the_runner_on_our_session_answers_as_on_sqlite_session(
    storage: SessionStorage, tmp_path: Path
) -> None:
    control = SQLiteSession("e2e", tmp_path / "control.db")

    async def nothing() -> None:
        return None

    try:
        expected, control_model = await _scenario(control, nothing)
    finally:
        control.close()
    assert expected == EXPECTED

    summarizer = RememberingSummarizer()
    session = OpenSquillaSession("e2e", storage, clear="reset", summarizer=summarizer)
    compacted: list[Any] = []

    async def compact() -> None:
        before = await session.get_items()
        result = await session.compact(500)
        assert result.removed_count > 0, result.skip_reason
        after = await session.get_items()
        compacted.append((before, after, result))

    answers, model = await _scenario(session, compact)
    assert answers == expected
    before, after, result = compacted[0]
    # get_items after the compaction: the summary first, then the kept items, unchanged
    assert after[0]["role"] == "system"
    assert after[0]["content"].startswith("[Compacted Session Summaries]")
    assert after[1:] == before[result.removed_count :]
    assert len(after) == len(before) - result.removed_count + 1
    # the model was given the summary as the first input item of the next turn
    recall = _first_recall(model)
    assert model.inputs[recall][0] == after[0]
    # the tool call and its output stayed together (kept or folded, never split)
    calls = [i for i in after if i.get("type") == "function_call"]
    outputs = [i for i in after if i.get("type") == "function_call_output"]
    assert [c["call_id"] for c in calls] == [o["call_id"] for o in outputs]
    # the reset: the old generation is archived, the new one holds only the last two turns
    manager = SessionManager(storage, inject_time_prefix=False)
    node = await manager.get_session(session.session_key)
    assert node is not None and node.epoch >= 1
    items = await session.get_items()
    assert [i.get("role") for i in items] == ["user", "assistant", "user", "assistant"]
    assert items[0]["content"].startswith("remember z1")
    # without the compaction the control's model saw every item; ours saw fewer
    assert len(model.inputs[recall]) < len(control_model.inputs[_first_recall(control_model)])
    await session.close()


async def test_the_runner_on_a_dsn_session_across_run_sync_loops(database: str) -> None:
    """``Runner.run_sync`` runs each turn on a new event loop: a session built from a DSN
    serves them all (one shared store, a pool per loop)."""
    model = ScriptedModel()
    agent = scripted_agent(model)
    session = OpenSquillaSession("sync", database)

    def run_sync_turns() -> list[str]:
        answers = []
        for text in ("remember a1", "add 4 5", "recall"):
            answers.append(str(Runner.run_sync(agent, text, session=session).final_output))
        return answers

    assert await asyncio.to_thread(run_sync_turns) == ["noted a1", "sum 9", "recall: a1"]
    assert len(await session.get_items()) == 8  # 2 + 4 (call, output) + 2
    await session.close()
