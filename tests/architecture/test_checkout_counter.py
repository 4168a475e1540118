"""The counter itself counts: one checkout per unit of work, two for two."""

from __future__ import annotations

from opensquilla.session import SessionStorage

from .conftest import CheckoutCounter


async def test_one_unit_is_one_checkout(
    storage: SessionStorage, checkouts: CheckoutCounter
) -> None:
    with checkouts.counting():
        async with storage.uow.read():
            pass
    assert checkouts.count == 1
    with checkouts.counting():
        async with storage.uow.read():
            pass
        async with storage.uow.write():
            pass
    assert checkouts.count == 2
