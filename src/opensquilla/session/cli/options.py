"""The options and arguments the commands share, each declared once.

A command names its parameters with these aliases (``as_json: Json = False``), so an
option's name, range and help text are the same wherever it appears. Defaults stay at each
command: they are part of what that command means.
"""

from __future__ import annotations

import re
from typing import Annotated

import typer

from ..errors import InvalidInputError
from ..models import INT64_MAX  # the largest count, id or age (ms) the store holds

MAX_JOBS = 64  # copy's concurrent target transactions (each holds a connection)
MAX_BATCH = 100_000  # copy's sessions per source snapshot (held in memory at once)

_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|m|h|d|w)\s*$")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}


def parse_duration(text: str) -> int:
    """``30d``, ``12h``, ``90m``, ``45s``, ``500ms``, ``2w`` -> milliseconds."""
    match = _DURATION.match(text or "")
    if match is None:
        raise InvalidInputError(
            f"invalid duration {text!r}: use a whole number and a unit, e.g. 30d, 12h, 90m, 45s"
        )
    return int(match.group(1)) * _UNIT_MS[match.group(2)]


# -- global ----------------------------------------------------------------------------

Dsn = Annotated[
    str | None,
    typer.Option(
        "--dsn",
        help="Database: a SQLite path or URL, or postgresql://... "
        "(default: $OPENSQUILLA_SESSION_DSN, else ~/.opensquilla/sessions.db).",
    ),
]
Verbose = Annotated[
    int,
    typer.Option(
        "--verbose",
        "-v",
        count=True,
        help="Log to stderr: -v info, -vv debug. A counted flag: repeat it (-vv or "
        "-v -v); it takes no number.",
    ),
]

# -- output and safety -----------------------------------------------------------------

Json = Annotated[
    bool, typer.Option("--json", help="Print JSON (strict, one document) instead of text.")
]
DryRun = Annotated[bool, typer.Option("--dry-run", help="Only report what would go.")]

# -- selecting -------------------------------------------------------------------------

SessionKey = Annotated[str, typer.Argument(help="Session key.")]
SummaryId = Annotated[
    int, typer.Argument(min=0, max=INT64_MAX, help="Summary id (from 'repair list').")
]
Limit = Annotated[
    int, typer.Option("--limit", min=0, max=INT64_MAX, help="Show at most this many.")
]
Offset = Annotated[
    int,
    typer.Option(
        "--offset",
        min=0,
        max=INT64_MAX,
        help="Skip this many first (an offset listing: no --cursor for the next page).",
    ),
]
ListCursor = Annotated[
    str | None,
    typer.Option(
        "--cursor",
        help="Start after this session: the <updated_at>:<session_key> a page printed last.",
    ),
]
PageLimit = Annotated[
    int | None,
    typer.Option(
        "--limit",
        min=1,
        max=INT64_MAX,
        help="Show a page of this many messages of the canonical transcript, newest first.",
    ),
]
PageBefore = Annotated[
    str | None,
    typer.Option(
        "--before",
        help="Page older than this message: the <created_at>:<id> a page printed last.",
    ),
]
AgentFilter = Annotated[str | None, typer.Option("--agent", help="Only this agent.")]

# -- the LLM summariser (compact, demo) --------------------------------------------------

LLMBaseUrl = Annotated[
    str | None,
    typer.Option(
        "--llm-base-url",
        help="OpenAI-compatible endpoint for an LLM summary, e.g. http://127.0.0.1:8000/v1 "
        "(default: $OPENSQUILLA_SESSION_LLM_BASE_URL; neither: the deterministic summary).",
    ),
]
LLMModel = Annotated[
    str | None,
    typer.Option(
        "--llm-model",
        help="Model name sent to the endpoint (default: $OPENSQUILLA_SESSION_LLM_MODEL).",
    ),
]
LLMApiKeyEnv = Annotated[
    str | None,
    typer.Option(
        "--llm-api-key-env",
        help="NAME of the environment variable holding the API key, never the key itself "
        "(default: $OPENSQUILLA_SESSION_LLM_API_KEY_ENV, else OPENSQUILLA_SESSION_LLM_API_KEY).",
    ),
]
LLMTimeout = Annotated[
    str | None,
    typer.Option(
        "--llm-timeout",
        help="Seconds per request before that chunk falls back to the deterministic summary "
        "(default: $OPENSQUILLA_SESSION_LLM_TIMEOUT, else 90).",
    ),
]
