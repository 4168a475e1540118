"""The records' base class and the session, summary and context-state records.

Models are plain mutable objects, detached from any database session: callers read them,
change them and hand them back. Field names, types and defaults are the contract's
(docs/semantics.md#tables); field order is each table's column order (the export format
and ``model_dump`` follow it).
"""

from __future__ import annotations

import collections
import functools
import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Annotated, Any, Self, TypedDict, cast

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..errors import InvalidInputError
from ..support.clock import new_session_id, now_ms
from .checks import (
    LABEL_MAX_LENGTH,
    PROVIDER_MAX_LENGTH,
    STATE_KIND_MAX_LENGTH,
    WORKSPACE_ID_MAX_LENGTH,
    AgentId,
    Count32,
    Count64,
    Finite,
    Flag,
    Int32,
    Int64,
    JSONObject,
    LineageKey,
    Millis,
    SessionId,
    SessionKey,
    SummaryCompactionId,
    Text,
    describe,
    invalid_input,
    member_of,
)
from .enums import ChatType, FlushReceiptStatus, QueueMode, SendPolicy, SessionStatus

# The setters of a model instance's ``__dict__`` and of pydantic's three per-instance
# slots (a slot's own setter is the quickest way to fill it); a KeyError here means
# pydantic's instance layout changed.
_SLOT_SETTERS = tuple(
    vars(BaseModel)[name].__set__
    for name in (
        "__dict__",
        "__pydantic_fields_set__",
        "__pydantic_extra__",
        "__pydantic_private__",
    )
)


@functools.lru_cache(maxsize=256)
def _row_builder(
    fields: tuple[str, ...], converted: tuple[str, ...], given: tuple[str, ...] = ()
) -> Callable[..., list[Any]]:
    """The loop of :meth:`_Record.from_rows` for rows of ``fields``, compiled once per
    field list (as ``dataclasses`` compiles an ``__init__``). Each row is unpacked into
    locals and its ``__dict__`` is one dict display with the field names as constants (a
    converted field: ``None if v is None else c(v)``), in one list comprehension: about
    half the cost of ``dict(zip(fields, row))`` in a loop. The records are then made and
    their four slots filled by ``map`` over the slots' own setters, with no bytecode per
    record. ``given`` names the fields (in ``fields``' order, among them) that the rows do
    not hold: each record gets the value passed for it. The source holds no name from the
    caller: locals are ``v0``, ``v1``..., ``g0``..., field names are ``repr()`` constants.
    """
    read = [name for name in fields if name not in given]
    if (
        not read
        or len(set(fields)) != len(fields)
        or not set(converted) <= set(read)
        or not set(given) <= set(fields)
    ):
        raise ValueError(f"fields must be distinct and include the converted ones: {fields}")
    converter_of = {name: f"c{index}" for index, name in enumerate(converted)}
    local = {name: f"v{index}" for index, name in enumerate(read)}
    local.update({name: f"g{index}" for index, name in enumerate(given)})
    items = ", ".join(
        f"{name!r}: None if {local[name]} is None else {converter_of[name]}({local[name]})"
        if name in converter_of
        else f"{name!r}: {local[name]}"
        for name in fields
    )
    targets = "".join(f"v{index}, " for index in range(len(read)))
    parameters = [*converter_of.values(), *(local[name] for name in given)]
    source = "\n".join(
        [
            "def build(rows, cls, fields_set, set_dict, set_fields_set, set_extra, set_private"
            f"{''.join(', ' + name for name in parameters)}):",
            f"    dicts = [{{{items}}} for {targets}in rows]",
            "    count = len(dicts)",
            "    out = list(map(new, repeat(cls, count)))",
            "    consume(map(set_dict, out, dicts))",
            "    consume(map(set_fields_set, out, repeat(fields_set, count)))",
            "    consume(map(set_extra, out, repeat(None, count)))",
            "    consume(map(set_private, out, repeat(None, count)))",
            "    return out",
        ]
    )
    namespace: dict[str, Any] = {
        "new": object.__new__,
        "repeat": itertools.repeat,
        "consume": collections.deque(maxlen=0).extend,
    }
    exec(compile(source, f"<from_rows of {len(fields)} fields>", "exec"), namespace)
    return cast(Callable[..., list[Any]], namespace["build"])


class _Record(BaseModel):
    """Base of the persisted records: mutable, strict about unknown fields and values.

    Every way to put a value into a record validates it against the value domain
    (``checks.py``: construction, assignment, ``model_copy(update=...)``) and refuses it
    with an :class:`InvalidInputError`; only the read path (:meth:`from_rows`,
    :meth:`from_row`) does not.
    """

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    def __init__(self, /, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise invalid_input(exc) from exc

    def __setattr__(self, name: str, value: Any) -> None:
        try:
            super().__setattr__(name, value)
        except ValidationError as exc:
            raise invalid_input(exc) from exc

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """A copy; the ``update`` values are validated like assignments."""
        copied = super().model_copy(deep=deep)
        for name, value in (update or {}).items():
            setattr(copied, name, value)
        return copied

    @classmethod
    def from_rows(
        cls,
        rows: Iterable[Sequence[Any]],
        fields: Sequence[str],
        converters: Sequence[tuple[str, Callable[[Any], Any]]] = (),
        given: Mapping[str, Any] | None = None,
    ) -> list[Self]:
        """One record per row, without validation: the read hot path (a 100k-entry
        transcript is 100k records), and the one place that sets pydantic's per-instance
        state by hand (``tests/unit/test_fast_records.py`` pins it to pydantic's own).

        Each row holds the values of exactly ``fields`` (every field of the model), in that
        order, typed as the fields are, except the fields named in ``converters``, whose
        non-``None`` values are converted first (JSON text, SQLite's 0/1 booleans...); a
        row of another length is a ``ValueError``. ``given`` holds the values of fields the
        rows leave out, the same in every record (a column the read's ``WHERE`` pinned);
        the records' fields are then in the model's order. What ``model_construct`` does for a full
        set of fields, without its per-field bookkeeping: per row, one ``__dict__`` and one
        object with pydantic's three slots (see :func:`_row_builder`).

        The records of one call share one ``__pydantic_fields_set__`` set. It holds every
        field, and pydantic only ever adds field names to it (assignment), so it never
        changes; ``model_copy`` gives each copy its own. A set per record would cost a
        kilobyte and one more garbage-collected object per row.
        """
        fields = tuple(fields)
        names = fields
        if given:
            every = (*fields, *given)
            names = tuple(name for name in cls.model_fields if name in every)
            if len(names) != len(every) or tuple(n for n in names if n not in given) != fields:
                raise ValueError(f"not {cls.__name__}'s fields in its order: {every}")
        build = _row_builder(names, tuple(name for name, _ in converters), tuple(given or ()))
        return build(
            rows,
            cls,
            set(names),
            *_SLOT_SETTERS,
            *(convert for _, convert in converters),
            *(given or {}).values(),
        )

    @classmethod
    def from_fields(cls, values: dict[str, Any], fields_set: set[str]) -> Self:
        """One record that takes ``values`` as its ``__dict__`` (not copied) and
        ``fields_set`` as its set of fields given, without validation: ``values`` holds
        every field of the model, in its order, each already of its field's type (the
        append builds its entry from values the front door checked). What
        :meth:`from_rows` does per row, without its per-call set-up, for one record."""
        record = object.__new__(cls)
        set_dict, set_fields_set, set_extra, set_private = _SLOT_SETTERS
        set_dict(record, values)
        set_fields_set(record, fields_set)
        set_extra(record, None)
        set_private(record, None)
        return record

    @classmethod
    def from_row(cls, values: Mapping[str, Any]) -> Self:
        """Build from one complete row whose values are already typed, by field name
        (:meth:`from_rows` for a single row)."""
        return cls.from_rows((tuple(values.values()),), tuple(values))[0]


class _SessionOwned(_Record):
    """The first columns of every row a session owns: the row id (the database's) and the
    generation and key it belongs to."""

    id: Int64 | None = None
    session_id: SessionId
    session_key: SessionKey


class SessionNode(_Record):
    """One session row (table ``sessions``): identity, routing, counters, lineage."""

    session_key: SessionKey
    session_id: SessionId = Field(default_factory=new_session_id)
    created_at: Millis = Field(default_factory=now_ms)
    updated_at: Millis = Field(default_factory=now_ms)
    started_at: Millis | None = None
    ended_at: Millis | None = None
    runtime_ms: Int64 | None = None
    last_channel: Text | None = None
    last_to: Text | None = None
    last_account_id: Text | None = None
    last_thread_id: Text | None = None
    delivery_context: JSONObject | None = None
    model: Text | None = None
    model_provider: Text | None = None
    provider_override: Text | None = None
    model_override: Text | None = None
    auth_profile_override: Text | None = None
    auth_profile_override_source: Text | None = None
    context_tokens: Count64 | None = None
    model_routing_mode: Text | None = None
    model_routing_revision: Int64 = 0
    input_tokens: Count64 = 0
    output_tokens: Count64 = 0
    total_tokens: Count64 = 0
    total_tokens_fresh: Flag = False
    estimated_cost_usd: Finite = 0.0
    total_cost_usd: Finite = 0.0
    billed_cost_usd: Finite = 0.0
    estimated_cost_component_usd: Finite = 0.0
    cost_source: Text = "none"
    missing_cost_entries: Count64 = 0
    cache_read: Count64 = 0
    cache_write: Count64 = 0
    compaction_count: Count32 = 0
    session_file: Text | None = None
    spawned_by: LineageKey | None = None
    parent_session_key: LineageKey | None = None
    forked_from_parent: Flag = False
    spawn_depth: Count32 = 0
    status: Annotated[Text, member_of(SessionStatus)] = SessionStatus.RUNNING.value
    chat_type: Annotated[Text, member_of(ChatType)] = ChatType.UNKNOWN.value
    thinking_level: Text | None = None
    fast_mode: Flag = False
    verbose_level: Text | None = None
    reasoning_level: Text | None = None
    send_policy: Annotated[Text, member_of(SendPolicy)] = SendPolicy.ALLOW.value
    queue_mode: Annotated[Text, member_of(QueueMode)] = QueueMode.STEER.value
    collaboration_mode: Text = "default"
    collaboration_revision: Int64 = 0
    active_plan_revision_id: Text | None = None
    label: Annotated[Text, Field(max_length=LABEL_MAX_LENGTH)] | None = None
    display_name: Text | None = None
    derived_title: Text | None = None
    channel: Text | None = None
    group_id: Text | None = None
    subject: Text | None = None
    origin: JSONObject | None = None
    workspace_id: Annotated[Text, Field(max_length=WORKSPACE_ID_MAX_LENGTH)] | None = None
    agent_id: AgentId = "main"
    schema_version: Int32 = 1
    epoch: Count64 = 0


def check_session_values(values: object) -> dict[str, Any]:
    """Column values for a partial update of a session row, each checked in the domain of
    its :class:`SessionNode` field (unknown names refused); the values to write."""
    if not isinstance(values, Mapping):
        raise InvalidInputError(f"values must be a mapping, not {describe(values)}")
    unknown = sorted(str(name)[:40] for name in values if name not in SessionNode.model_fields)
    if unknown:
        raise InvalidInputError(f"unknown session field(s): {', '.join(unknown)}")
    node = SessionNode.model_construct(session_key="-")
    for name, value in values.items():
        setattr(node, name, value)
    return {name: node.__dict__[name] for name in values}


class SessionSummary(_SessionOwned):
    """One compaction summary (table ``session_summaries``)."""

    compaction_index: Count32 = 0
    # Free text in this table (NUL kept); bounded because the compacted archive's index
    # (session_id, compaction_id) carries it too.
    compaction_id: SummaryCompactionId | None = None
    trigger_reason: Text | None = None
    summary_text: Text
    summary_payload: JSONObject | None = None
    summary_format: Text = "text"
    summary_source: Text = "unknown"
    coverage_status: Text = "unknown"
    missing_obligations: list[Text] | None = None
    critical_carry_forward: list[Text] | None = None
    tokens_before: Count64 | None = None
    tokens_after: Count64 | None = None
    removed_count: Count32 = 0
    kept_count: Count32 = 0
    chunk_count: Count32 = 0
    flush_receipt_status: Text = FlushReceiptStatus.UNKNOWN.value
    covered_through_id: Int64 = 0
    created_at: Millis = Field(default_factory=now_ms)
    schema_version: Int32 = 1


class SessionContextState(_SessionOwned):
    """A provider context state (table ``session_context_states``)."""

    provider: Annotated[Text, Field(max_length=PROVIDER_MAX_LENGTH)] = "portable"
    model: Text | None = None
    state_kind: Annotated[Text, Field(max_length=STATE_KIND_MAX_LENGTH)]
    payload: JSONObject = Field(default_factory=dict)
    covered_through_id: Int64 = 0
    created_at: Millis = Field(default_factory=now_ms)
    expires_at: Millis | None = None
    portable: Flag = False
    cacheable: Flag = False
    valid: Flag = True
    invalid_reason: Text | None = None
    schema_version: Int32 = 1


class StateSelection(TypedDict, total=False):
    """Which context states of a key a call addresses (``None``: any provider, any kind);
    declared once for every layer (``Unpack[StateSelection]``)."""

    provider: str | None
    state_kind: str | None


class ContextStateFilter(StateSelection, total=False):
    """The filter of ``get_context_states`` (``valid_only`` defaults to ``True``)."""

    valid_only: bool
