from opensquilla.session import SessionManager


async def test_backend_fixture_gives_a_working_store(manager: SessionManager) -> None:
    node = await manager.create("agent:main:main")
    await manager.append_message("agent:main:main", "user", "hello")
    assert [e.content for e in await manager.get_transcript(node.session_key)] == ["hello"]
