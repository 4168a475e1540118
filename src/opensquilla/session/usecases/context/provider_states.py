"""Choosing the context state a provider request replays, and OpenAI Responses' compacted
window as a context state (docs/semantics.md#provider-states). Pure functions: no I/O.

A context state is either *portable* (``portable=True``, any provider can replay it: the
structured summary compaction saves) or *native* to one provider (``provider`` names it, its
payload is opaque to everyone else: an Anthropic compaction block, the output of OpenAI's
``/responses/compact``). Only a usable state counts: valid, unexpired, a dict payload.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from copy import deepcopy
from typing import Any

from ...errors import InvalidInputError
from ...keys import canonicalize_session_key
from ...models import SessionContextState, check_optional_integer, check_optional_text
from ...support.clock import now_ms as clock_ms

OPENAI_RESPONSES_PROVIDER = "openai_responses"
OPENAI_RESPONSES_COMPACTED_WINDOW_STATE_KIND = "openai_responses_compacted_window"


def context_state_order_key(position: int, state: SessionContextState) -> tuple[int, int, int]:
    """Upstream's order for "the latest state": ``created_at``, then ``id`` (an unsaved state,
    ``None``, sorts first), then the position in the list given."""
    return (state.created_at, state.id if state.id is not None else -1, position)


def usable(state: SessionContextState, now: int) -> bool:
    """Valid, not expired at ``now`` (``expires_at`` NULL or later), a dict payload."""
    if not state.valid or not isinstance(state.payload, dict):
        return False
    return state.expires_at is None or state.expires_at > now


def latest_context_state(
    states: Sequence[SessionContextState],
    provider: str | None = None,
    *,
    state_kind: str | None = None,
    now_ms: int | None = None,
) -> SessionContextState | None:
    """The state to replay to ``provider``: of the usable ``states`` (valid, unexpired at
    ``now_ms``, default now, with a dict payload) that ``provider`` can read, its own native
    ones (``state.provider == provider``) and every portable one, the newest by
    (``created_at``, ``id``, position); ``None`` if there is none. ``provider=None``: any
    provider's. ``state_kind`` keeps only that kind. A native state of another provider is
    never chosen: its payload means nothing to this one."""
    check_optional_text("provider", provider)
    check_optional_text("state_kind", state_kind)
    check_optional_integer("now_ms", now_ms)
    if not isinstance(states, Sequence) or isinstance(states, str):
        raise InvalidInputError(
            f"states must be a list of SessionContextState, not {type(states).__name__}"
        )
    now = clock_ms() if now_ms is None else now_ms
    best: tuple[tuple[int, int, int], SessionContextState] | None = None
    for position, state in enumerate(states):
        if not isinstance(state, SessionContextState):
            raise InvalidInputError(
                f"states[{position}] must be a SessionContextState, not {type(state).__name__}"
            )
        if not usable(state, now):
            continue
        if provider is not None and state.provider != provider and not state.portable:
            continue
        if state_kind is not None and state.state_kind != state_kind:
            continue
        key = context_state_order_key(position, state)
        if best is None or key > best[0]:
            best = (key, state)
    return best[1] if best is not None else None


def openai_responses_compacted_window_state(
    *,
    session_id: str,
    session_key: str,
    model: str,
    compact_response: dict[str, Any],
    covered_through_id: int,
) -> SessionContextState:
    """A native ``openai_responses`` state from a ``/responses/compact`` response: its
    ``output`` array is the next context window, retained items and encrypted compaction
    items alike, so it is stored unchanged (payload ``response_id``, ``output``, ``usage``,
    ``opaque: true``), never portable or cacheable. Only the envelope is checked: a response
    without an ``output`` list is an ``InvalidInputError``. Save it with
    ``save_context_state``."""
    if not isinstance(compact_response, dict) or not isinstance(
        compact_response.get("output"), list
    ):
        raise InvalidInputError("an OpenAI Responses compact response must have an output list")
    payload = {
        "response_id": compact_response.get("id"),
        "output": deepcopy(compact_response["output"]),
        "usage": deepcopy(compact_response.get("usage")),
        "opaque": True,
    }
    return SessionContextState(
        session_id=session_id,
        session_key=canonicalize_session_key(session_key),
        provider=OPENAI_RESPONSES_PROVIDER,
        model=model,
        state_kind=OPENAI_RESPONSES_COMPACTED_WINDOW_STATE_KIND,
        payload=payload,
        covered_through_id=covered_through_id,
        portable=False,
        cacheable=False,
        valid=True,
    )


def build_openai_responses_input_items(
    *,
    context_states: Sequence[SessionContextState],
    current_items: list[dict[str, Any]],
    now_ms: int | None = None,
) -> list[dict[str, Any]]:
    """The Responses ``input`` for the next request: the newest usable compacted window's
    ``output`` replayed as it is, then ``current_items`` (copies of both); just the current
    items without such a state. ``current_items`` must be a list of dicts (a string or a
    dict is refused, not taken for its characters or keys), ``now_ms`` an int >= 0."""
    if not isinstance(current_items, Sequence) or isinstance(current_items, str | bytes):
        raise InvalidInputError(
            f"current_items must be a list of dicts, not {type(current_items).__name__}"
        )
    for position, item in enumerate(current_items):
        if not isinstance(item, Mapping):
            raise InvalidInputError(
                f"current_items[{position}] must be a dict, not {type(item).__name__}"
            )
    check_optional_integer("now_ms", now_ms)
    windows = [
        state
        for state in context_states
        if isinstance(state, SessionContextState)
        and state.provider == OPENAI_RESPONSES_PROVIDER
        and isinstance(state.payload.get("output"), list)
    ]
    latest = latest_context_state(
        windows,
        OPENAI_RESPONSES_PROVIDER,
        state_kind=OPENAI_RESPONSES_COMPACTED_WINDOW_STATE_KIND,
        now_ms=now_ms,
    )
    replayed = deepcopy(latest.payload["output"]) if latest is not None else []
    return [*replayed, *deepcopy(current_items)]
