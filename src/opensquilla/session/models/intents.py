"""A prepared session intent: what ``apply_intent`` or a prefix fork would write, decided
and returned without writing (docs/semantics.md#prepared-intents); and a branch's options,
declared once (:class:`BranchOptions`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, TypedDict

from .messages import TranscriptEntry
from .records import SessionNode

PreparedAction = Literal["create", "reset", "continue", "fork"]
ForkMode = Literal["none", "full", "prefix"]


class BranchOptions(TypedDict, total=False):
    """What a branch copies and how the child starts (docs/semantics.md#branching),
    declared once for every layer below the front door (``Unpack``), which checked them:
    ``status`` a ``SessionStatus`` value, ``fork`` the copy (``none``, ``full``, or
    ``prefix`` before ``before_message_id``), ``max_fork_tokens`` the copy's budget,
    ``session_id`` a chosen (free) generation id for the child, ``display_name`` its name."""

    status: str
    fork: ForkMode
    before_message_id: str | None
    max_fork_tokens: int | None
    session_id: str | None
    display_name: str | None


@dataclass(frozen=True)
class PreparedSessionIntent:
    """The session row an intent leads to, and what else writing it takes.

    ``action`` says which write applies it: ``create`` inserts ``node`` (the key was free
    when read), ``reset`` replaces generation ``previous_session_id`` of ``previous_node`` by
    ``node`` (a new id, the epoch one higher, zero counters), ``continue`` writes nothing
    (``node`` is the stored row), ``fork`` inserts the child ``node`` and then
    ``initial_transcript_entries`` (copies of the parent's rows, owned by the child, with
    fresh message ids and no row ids). ``expected_epoch`` is the epoch the turn's appends
    are fenced to once the plan is applied: ``node.epoch``.

    A ``reset`` plan is applied with ``apply_intent(key, RESET_SAME_KEY)``, never by writing
    ``node`` with ``upsert_session``: that would be accepted (a higher epoch), yet skip what a
    reset does besides the row (the old generation's transcript archived, its rows, summaries
    and states deleted). Its ``node.session_id`` is a preview: ``apply_intent`` makes the new
    generation's id itself.

    Nothing was written or reserved: a concurrent writer can take the key or change the
    parent meanwhile, which the applying write has to check (upstream applies plans in its
    turn-acceptance transaction, outside this store's five tables)."""

    node: SessionNode
    action: PreparedAction
    expected_epoch: int
    previous_session_id: str | None = None
    previous_node: SessionNode | None = None
    initial_transcript_entries: tuple[TranscriptEntry, ...] = ()
