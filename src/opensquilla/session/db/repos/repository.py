"""What every repository is: a class bound to the connection of one unit of work."""

from __future__ import annotations

from typing import Protocol

from sqlalchemy.ext.asyncio import AsyncConnection


class Generation(Protocol):
    """One generation of a session as a copy between sessions addresses it, source or
    target: its key and its id (a ``SessionNode`` is one)."""

    @property
    def session_key(self) -> str: ...

    @property
    def session_id(self) -> str: ...


class Repository:
    """Statements run on ``conn``, the connection of one unit of work (``db/uow.py``); a
    repository never commits. A subclass declares ``__slots__ = ()`` and its statements."""

    __slots__ = ("conn",)

    def __init__(self, conn: AsyncConnection) -> None:
        self.conn = conn
