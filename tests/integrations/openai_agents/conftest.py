"""Agents SDK tests: no network, no tracing export, a dummy key for the SDK's defaults."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from agents import set_tracing_disabled


@pytest.fixture(autouse=True)
def _offline_sdk(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-dummy-never-used")
    set_tracing_disabled(True)
    yield
