"""A scripted agent conversation that walks through the store's main operations.

``opensquilla-session demo`` runs it in a new temporary directory (``--dir`` names another
directory, ``--dsn`` or ``$OPENSQUILLA_SESSION_DSN`` a database), never in the embedded
default database: create a session, append a conversation with tool calls, compact it
(summary, coverage, archive), branch before a message, and reset it (the old generation
goes to an archive file). It says where it wrote, and each step names the glossary entries
(URLs) of the terms it prints. Every run uses a fresh key, so it can be run again and again.

The script lives with the command (not in the library): it is a walkthrough for people
trying the store, and the command is its only caller.
"""

from __future__ import annotations

import json
import os
import secrets
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import typer

from ..compaction import CompactionConfig
from ..config import DSN_ENV, GLOSSARY_URL
from ..manager import SessionManager
from ..storage import SessionStorage
from .options import Json, LLMApiKeyEnv, LLMBaseUrl, LLMModel, LLMTimeout
from .render.demo import DEMO, DemoRun
from .runtime import Options, dsn, fail, run
from .summarizer import ChosenSummarizer, LLMOptions, choose_summarizer, describe_line, fallback

DEMO_AGENT = "demo"
DEMO_WINDOW_TOKENS = 2000


def _call(call_id: str, name: str, arguments: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments)},
        }
    ]


# (role, content, tool_calls, tool_call_id, token_count): what a gateway would append.
SCRIPT: tuple[tuple[str, str, list[dict[str, Any]] | None, str | None, int], ...] = (
    ("user", "I'm going to Lisbon next week. What will the weather be like?", None, None, 180),
    (
        "assistant",
        "",
        _call("call_weather_1", "get_weather", {"city": "Lisbon", "days": 7}),
        None,
        120,
    ),
    (
        "tool",
        '{"city": "Lisbon", "forecast": ["rain", "rain", "sun", "sun", "cloud", "sun", "sun"], '
        '"high_c": 19}',
        None,
        "call_weather_1",
        220,
    ),
    (
        "assistant",
        "Rain on Monday and Tuesday, then mostly sun, highs around 19 °C. Pack a light jacket.",
        None,
        None,
        160,
    ),
    (
        "user",
        "Book a table for two at Taberna da Rua on Wednesday at 20:00; send the confirmation "
        "to ana@example.com.",
        None,
        None,
        170,
    ),
    (
        "assistant",
        "",
        _call(
            "call_booking_1",
            "book_table",
            {"restaurant": "Taberna da Rua", "day": "Wednesday", "time": "20:00", "people": 2},
        ),
        None,
        140,
    ),
    (
        "tool",
        '{"status": "confirmed", "reference": "TBL-58213", "time": "Wednesday 20:00"}',
        None,
        "call_booking_1",
        200,
    ),
    (
        "assistant",
        "Booked: Taberna da Rua, Wednesday 20:00, two people, reference TBL-58213. The "
        "confirmation goes to ana@example.com.",
        None,
        None,
        170,
    ),
    ("user", "Save the itinerary to /home/ana/trips/lisbon.md, please.", None, None, 150),
    (
        "assistant",
        "",
        _call("call_file_1", "write_file", {"path": "/home/ana/trips/lisbon.md"}),
        None,
        130,
    ),
    ("tool", '{"written_bytes": 1210}', None, "call_file_1", 110),
    ("assistant", "Saved the itinerary to /home/ana/trips/lisbon.md.", None, None, 120),
    ("user", "Thanks! What should I do on the sunny days?", None, None, 150),
    (
        "assistant",
        "Walk up to the Castelo de São Jorge in the morning, take tram 28 through Alfama, and "
        "watch the sunset from the Miradouro da Senhora do Monte.",
        None,
        None,
        300,
    ),
)
BRANCH_BEFORE = 8  # the branch starts before the ninth message (the itinerary request)


# The glossary entries (docs/glossary.md anchors) of the terms each step prints.
STEP_TERMS: dict[str, tuple[str, ...]] = {
    "create": ("session-key", "generation", "epoch"),
    "append": ("transcript", "total-tokens"),
    "compact": (
        "compaction",
        "summarizer",
        "compacted-archive",
        "canonical-transcript",
        "coverage",
        "context-state",
        "summary",
    ),
    "branch": ("branch", "canonical-transcript"),
    "reset": ("reset", "generation", "epoch", "reset-archive"),
}


def glossary_url(term: str) -> str:
    """The glossary entry of ``term`` on the documentation site."""
    return f"{GLOSSARY_URL}#{term}"


@dataclass
class DemoStep:
    title: str
    lines: list[str]
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def terms(self) -> dict[str, str]:
        return {term: glossary_url(term) for term in STEP_TERMS.get(self.title, ())}


@dataclass
class DemoReport:
    session_key: str
    branch_key: str
    steps: list[DemoStep] = field(default_factory=list)

    def add(self, title: str, lines: list[str], **data: Any) -> None:
        self.steps.append(DemoStep(title, lines, data))


def demo_key() -> str:
    """A key no earlier run used: time of day plus random hex."""
    return f"agent:{DEMO_AGENT}:run-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"


def _preview(text: str | None, width: int = 72) -> str:
    flat = " ".join((text or "").split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


async def run_demo(
    manager: SessionManager,
    *,
    session_key: str | None = None,
    summarizer: ChosenSummarizer | None = None,
) -> DemoReport:
    """Play the script on ``manager`` and report each step (compacting with ``summarizer``,
    by default the deterministic fallback)."""
    key = session_key or demo_key()
    chosen = summarizer or fallback()
    report = DemoReport(session_key=key, branch_key=f"{key}:what-if")

    node = await manager.create(
        key,
        agent_id=DEMO_AGENT,
        model="demo-model",
        model_provider="scripted",
        channel="cli",
        chat_type="direct",
        label="opensquilla-session demo",
    )
    report.add(
        "create",
        [f"session {node.session_key}", f"generation {node.session_id}, epoch {node.epoch}"],
        session_id=node.session_id,
        epoch=node.epoch,
    )

    message_ids: list[str] = []
    lines: list[str] = []
    for role, content, tool_calls, tool_call_id, tokens in SCRIPT:
        entry = await manager.append_message(
            key,
            role,
            content,
            tool_calls=tool_calls,
            tool_call_id=tool_call_id,
            token_count=tokens,
        )
        message_ids.append(entry.message_id)
        if tool_calls:
            calls = ", ".join(call["function"]["name"] for call in tool_calls)
            lines.append(f"#{entry.id} {role}: calls {calls}")
        else:
            lines.append(f"#{entry.id} {role}: {_preview(entry.content)}")
    node = await manager.get_session(key) or node
    lines.append(f"{len(SCRIPT)} messages, total_tokens={node.total_tokens}")
    report.add("append", lines, messages=len(SCRIPT), total_tokens=node.total_tokens)

    result = await manager.compact_with_result(
        key,
        DEMO_WINDOW_TOKENS,
        CompactionConfig(),
        trigger_reason="demo",
        summarizer=chosen.summarizer,
    )
    live = await manager.get_transcript(key)
    canonical = await manager.get_canonical_transcript(key)
    states = await manager.get_context_states(key)
    summary_lines = [
        f"summarizer: {describe_line(chosen.description)}",
        f"window {DEMO_WINDOW_TOKENS} tokens: {result.tokens_before} -> {result.tokens_after}",
        f"removed {result.removed_count} messages into the archive, kept {len(live)} live",
        f"canonical transcript still holds all {len(canonical)} messages",
        f"coverage: {result.coverage_status}"
        + (
            f", missing {', '.join(result.missing_obligations)}"
            if result.missing_obligations
            else ""
        ),
        f"context states: {', '.join(state.state_kind for state in states) or 'none'}",
        "summary:",
        *("  " + line for line in [ln for ln in result.summary.splitlines() if ln.strip()][:12]),
    ]
    if result.skip_reason:
        summary_lines.insert(0, f"compaction skipped: {result.skip_reason}")
    report.add(
        "compact",
        summary_lines,
        removed=result.removed_count,
        kept=len(live),
        canonical=len(canonical),
        coverage_status=result.coverage_status,
        missing_obligations=result.missing_obligations or [],
        summarizer=chosen.description,
        summary_source=result.summary_source,
        summary=result.summary,
    )

    before = message_ids[BRANCH_BEFORE]
    child = await manager.branch(
        key, report.branch_key, fork_transcript=True, fork_before_message_id=before
    )
    child_transcript = await manager.get_transcript(child.session_key)
    report.add(
        "branch",
        [
            f"{child.session_key} branches off before message {before}",
            f"the branch starts with {len(child_transcript)} messages "
            "(copied from the canonical transcript, archive included)",
            f"parent_session_key={child.parent_session_key}, spawn_depth={child.spawn_depth}",
        ],
        branch_key=child.session_key,
        messages=len(child_transcript),
    )

    reset = await manager.reset_with_report(key)
    after = await manager.get_canonical_transcript(key)
    report.add(
        "reset",
        [
            f"generation {reset.previous_session_id} ended; now {reset.session.session_id} "
            f"at epoch {reset.session.epoch}",
            f"old generation archived to {reset.archive_path}"
            if reset.archive_path
            else f"old generation archived to row {reset.archive_id} of session_archives"
            if reset.archive_id is not None
            else "no archive was written",
            f"the key now holds {len(after)} messages",
        ],
        previous_session_id=reset.previous_session_id,
        session_id=reset.session.session_id,
        epoch=reset.session.epoch,
        archive_path=str(reset.archive_path) if reset.archive_path else None,
        archive_id=reset.archive_id,
    )
    return report


DemoDir = Annotated[
    Path | None,
    typer.Option(
        "--dir",
        help="Directory for the demo's database (sessions.db) and reset archives; default: "
        "a new temporary directory. --dsn or $OPENSQUILLA_SESSION_DSN name a database instead.",
        file_okay=False,
    ),
]


@dataclass(frozen=True)
class DemoPlace:
    """Where the demo writes: a database, and the directory its reset archives go to (None:
    the storage's default), and how it was chosen."""

    dsn: str
    archive_dir: Path | None
    chosen_by: str


def demo_place(ctx: typer.Context, directory: Path | None) -> DemoPlace:
    """``--dir``, else a database the user named (``--dsn``, the environment), else a new
    temporary directory: the demo never writes into the embedded default database."""
    options = ctx.find_object(Options)
    named = (options is not None and options.dsn is not None) or bool(
        os.environ.get(DSN_ENV, "").strip()
    )
    if directory is not None:
        if options is not None and options.dsn is not None:
            raise fail("give the demo --dir or --dsn, not both")
        directory = directory.expanduser()
        chosen_by = "--dir"
    elif named:
        return DemoPlace(dsn(ctx), None, "--dsn" if options and options.dsn else f"${DSN_ENV}")
    else:
        directory = Path(tempfile.mkdtemp(prefix="opensquilla-session-demo-"))
        chosen_by = "a new temporary directory"
    return DemoPlace(str(directory / "sessions.db"), directory / "session-archive", chosen_by)


def demo(
    ctx: typer.Context,
    as_json: Json = False,
    directory: DemoDir = None,
    llm_base_url: LLMBaseUrl = None,
    llm_model: LLMModel = None,
    llm_api_key_env: LLMApiKeyEnv = None,
    llm_timeout: LLMTimeout = None,
) -> None:
    """Play a scripted agent conversation in a new temporary directory (or --dir, --dsn)."""
    llm = LLMOptions(llm_base_url, llm_model, llm_api_key_env, llm_timeout)
    DEMO.show(run(lambda: _demo(ctx, directory, llm)), as_json)


async def _demo(ctx: typer.Context, directory: Path | None, llm: LLMOptions) -> DemoRun:
    """The call into the library: the script, on a manager of its own."""
    chosen = choose_summarizer(llm)  # bad LLM settings are refused before the database opens
    place = demo_place(ctx, directory)
    async with SessionStorage(place.dsn, archive_dir=place.archive_dir) as storage:
        report = await run_demo(SessionManager(storage), summarizer=chosen)
        return DemoRun(
            report,
            storage.target.render(),
            chosen_by=place.chosen_by,
            directory=str(place.archive_dir.parent) if place.archive_dir else None,
        )
