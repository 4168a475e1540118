"""Statements on ``session_states`` and ``scope_states`` (revision 0009): a session's state
and state wider than one session, each a JSON object with a compare-and-set ``revision``."""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, MetaData, Table, Text

from ..types import JSONText

# Not among the five tables: their own metadata, so export, import, retention and the drift
# check (which compare the five) never see them, and a session row's upsert never writes the
# state back from a stale read.
_metadata = MetaData()

session_states = Table(
    "session_states",
    _metadata,
    Column("session_key", Text, primary_key=True),
    # The generation the state belongs to: a state row of another session id is not this
    # generation's (a reset or a re-creation under the key starts from an empty state).
    Column("session_id", Text, nullable=False),
    Column("state", JSONText, nullable=False),
    Column("revision", BigInteger, nullable=False),
    Column("updated_at", BigInteger, nullable=False),
)

scope_states = Table(
    "scope_states",
    _metadata,
    Column("scope", Text, primary_key=True),
    Column("scope_id", Text, primary_key=True),
    Column("state", JSONText, nullable=False),
    Column("revision", BigInteger, nullable=False),
    Column("updated_at", BigInteger, nullable=False),
)
