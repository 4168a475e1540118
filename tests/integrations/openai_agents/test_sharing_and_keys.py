"""What a DSN-built session shares (one store per DSN, whatever the number of session
objects), the key scheme (documented, reversible), and the import guard (the core never
imports the SDK; the integration without it names the extra)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from opensquilla.session import SessionManager, SessionStorage
from opensquilla.session.errors import InvalidSessionKeyError
from opensquilla.session.integrations import _shared
from opensquilla.session.integrations.openai_agents import (
    OpenSquillaSession,
    parse_session_key,
    session_key,
)
from opensquilla.session.keys import canonicalize_session_key

REPO_ROOT = Path(__file__).resolve().parents[3]


async def test_a_hundred_sessions_on_one_dsn_hold_one_store(database: str) -> None:
    before = _shared.shared_storage_count()
    sessions = [OpenSquillaSession(f"request-{n}", database) for n in range(100)]
    for n, session in enumerate(sessions):
        await session.add_items([{"role": "user", "content": f"hello {n}"}])
    assert _shared.shared_storage_count() == before + 1
    stores = [(await s.manager()).storage for s in sessions]
    store = stores[0]
    assert all(other is store for other in stores)
    assert store.open_engines == 1  # one pool, one event loop
    assert await sessions[42].get_items() == [{"role": "user", "content": "hello 42"}]
    for session in sessions[:-1]:
        await session.close()
    assert store.is_connected  # the last lease still holds it
    await sessions[-1].close()
    assert not store.is_connected
    assert _shared.shared_storage_count() == before
    # a new session on the DSN opens it again, and sees what was written
    async with OpenSquillaSession("request-7", database) as again:
        assert await again.get_items() == [{"role": "user", "content": "hello 7"}]


async def test_memory_sessions_are_private() -> None:
    async with (
        OpenSquillaSession("a", ":memory:") as one,
        OpenSquillaSession("a", ":memory:") as two,
    ):
        await one.add_items([{"role": "user", "content": "only here"}])
        assert await two.get_items() == []


async def test_a_given_store_is_used_as_is(storage: SessionStorage) -> None:
    session = OpenSquillaSession("given", storage)
    assert (await session.manager()).storage is storage
    await session.add_items([{"role": "user", "content": "x"}])
    manager = SessionManager(storage, inject_time_prefix=False)
    assert (await manager.get_transcript(session.session_key))[0].content == "x"


@settings(max_examples=40)
@given(st.text(max_size=60), st.sampled_from(["main", "Planner", "", "default", "a b"]))
def test_the_key_is_reversible_and_already_canonical(session_id: str, agent_id: str) -> None:
    try:
        key = session_key(session_id, agent_id)
    except InvalidSessionKeyError:
        assert any("\ud800" <= ch <= "\udfff" for ch in session_id)
        return
    assert canonicalize_session_key(key) == key
    agent, parsed = parse_session_key(key)
    assert parsed == session_id
    assert key.startswith(f"agent:{agent}:openai-agents:")


def test_the_key_scheme_as_documented() -> None:
    assert session_key("user-42:chat 1") == "agent:main:openai-agents:user-42:chat%201"
    assert session_key("s", "Travel Bot") == "agent:travel-bot:openai-agents:s"
    assert parse_session_key("agent:main:openai-agents:a%2Fb:c") == ("main", "a/b:c")
    with pytest.raises(InvalidSessionKeyError, match="512"):
        session_key("x" * 600)
    with pytest.raises(InvalidSessionKeyError, match="surrogates"):
        session_key("\ud800")
    with pytest.raises(InvalidSessionKeyError, match="not an OpenAI Agents SDK session key"):
        parse_session_key("agent:main:other:x")
    assert OpenSquillaSession("a b", ":memory:", agent_id="Ops").session_key == (
        "agent:ops:openai-agents:a%20b"
    )


BLOCKER = textwrap.dedent(
    """
    import sys

    class Block:
        def find_spec(self, name, path=None, target=None):
            if name == "agents" or name.startswith("agents."):
                raise ModuleNotFoundError(f"No module named {name!r}")
            return None

    sys.meta_path.insert(0, Block())
    """
)


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", BLOCKER + textwrap.dedent(code)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_without_the_sdk_the_core_imports_and_the_integration_names_the_extra() -> None:
    done = _run(
        """
        import opensquilla.session, opensquilla.session.integrations
        assert not any(m == "agents" or m.startswith("agents.") for m in sys.modules)
        try:
            import opensquilla.session.integrations.openai_agents
        except ImportError as exc:
            print("refused:", exc)
        else:
            raise SystemExit("imported without the SDK")
        assert not any(m == "agents" or m.startswith("agents.") for m in sys.modules)
        """
    )
    assert done.returncode == 0, done.stderr
    assert "refused:" in done.stdout
    assert "pip install 'opensquilla-session[openai-agents]'" in done.stdout
