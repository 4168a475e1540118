"""Fixtures of the Google ADK integration's tests: a service on the test's store."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from opensquilla.session import SessionStorage
from opensquilla.session.integrations.google_adk import OpenSquillaSessionService


@pytest.fixture
async def service(storage: SessionStorage) -> AsyncIterator[OpenSquillaSessionService]:
    """A service on the test's (connected) store; the store is the fixture's, not closed
    by the service."""
    async with OpenSquillaSessionService(storage) as adk:
        yield adk
