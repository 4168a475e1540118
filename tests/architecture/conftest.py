"""Counting the units of work a public call opens (issue 27: exactly one per operation).

A unit of work holds one pooled connection for its whole life, so a call's units of work
are the pool checkouts it makes: ``checkouts`` counts them on the storage's engine through
the pool's own ``checkout`` event (the direct append path checks out of the same pool).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import event

from opensquilla.session import SessionStorage


class CheckoutCounter:
    """``with counter.counting(): ...`` counts the checkouts made inside the block."""

    def __init__(self, storage: SessionStorage) -> None:
        self._pool = storage.engine.sync_engine.pool
        self.count = 0

    def _seen(self, *_: Any) -> None:
        self.count += 1

    @contextlib.contextmanager
    def counting(self) -> Iterator[CheckoutCounter]:
        self.count = 0
        event.listen(self._pool, "checkout", self._seen)
        try:
            yield self
        finally:
            event.remove(self._pool, "checkout", self._seen)


@pytest.fixture
def checkouts(storage: SessionStorage) -> CheckoutCounter:
    return CheckoutCounter(storage)
