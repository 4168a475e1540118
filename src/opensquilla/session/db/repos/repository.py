"""What every repository is: a class bound to the connection of one unit of work."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncConnection


class Repository:
    """Statements run on ``conn``, the connection of one unit of work (``db/uow.py``); a
    repository never commits. A subclass declares ``__slots__ = ()`` and its statements."""

    __slots__ = ("conn",)

    def __init__(self, conn: AsyncConnection) -> None:
        self.conn = conn
