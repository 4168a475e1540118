"""An outage reads as an outage (issue 31, item 1).

A PostgreSQL server starting up or shutting down (SQLSTATE 57P03), out of connection slots
(53300) or closing sessions (57P01, 57P02) used to raise a plain ``DatabaseError``: 517 of
581 errors in one restart, so a caller's retry-on-unavailable missed most of the outage.
Now every SQLSTATE that means "not serving this connection now" is
``DatabaseUnavailableError``.

A fake server speaks just enough of the PostgreSQL protocol to refuse a connection with a
given SQLSTATE, as a real one does during a restart; it listens on localhost, so these tests
run in both test sessions. The translation seam is also pinned with fake driver exceptions
for codes that arrive on an established connection.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator

import pytest
from sqlalchemy import exc as sa_exc

from opensquilla.session import SessionStorage
from opensquilla.session.db.errors import translate
from opensquilla.session.errors import DatabaseError, DatabaseUnavailableError

OUTAGE_CODES = ["57P03", "53300", "57P01", "57P02", "08006", "08001", "08004"]
NOT_AN_OUTAGE = ["42P01", "40001", "XX000", "28P01"]

_SSL_REQUEST = 80877103
_GSSENC_REQUEST = 80877104


def _error_response(sqlstate: str, message: str) -> bytes:
    fields = b"".join(
        tag + value.encode() + b"\0"
        for tag, value in ((b"S", "FATAL"), (b"V", "FATAL"), (b"C", sqlstate), (b"M", message))
    )
    body = fields + b"\0"
    return b"E" + struct.pack("!I", len(body) + 4) + body


class FakeServer:
    """Refuses every connection with one SQLSTATE, as PostgreSQL does before it has read
    the startup packet's credentials (starting up, shutting down, no slots)."""

    def __init__(self, sqlstate: str) -> None:
        self.sqlstate = sqlstate
        self.refused = 0
        self.server: asyncio.Server | None = None

    @property
    def port(self) -> int:
        assert self.server is not None
        return int(self.server.sockets[0].getsockname()[1])

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                (length,) = struct.unpack("!I", await reader.readexactly(4))
                body = await reader.readexactly(length - 4)
                (code,) = struct.unpack("!I", body[:4])
                if code in (_SSL_REQUEST, _GSSENC_REQUEST):
                    writer.write(b"N")  # no encryption here: go on in plain text
                    await writer.drain()
                    continue
                self.refused += 1
                writer.write(_error_response(self.sqlstate, f"fake refusal {self.sqlstate}"))
                await writer.drain()
                return
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            writer.close()

    async def __aenter__(self) -> FakeServer:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()


@pytest.fixture
async def fake_server(request: pytest.FixtureRequest) -> AsyncIterator[FakeServer]:
    async with FakeServer(request.param) as server:
        yield server


@pytest.mark.parametrize("fake_server", OUTAGE_CODES, indirect=True)
async def test_connect_during_an_outage_raises_unavailable(fake_server: FakeServer) -> None:
    storage = SessionStorage(f"postgresql://opensquilla@127.0.0.1:{fake_server.port}/store")
    with pytest.raises(DatabaseUnavailableError) as caught:
        await storage.connect()
    assert fake_server.refused >= 1
    assert not storage.is_connected
    assert fake_server.sqlstate in str(caught.value) or "fake refusal" in str(caught.value)


@pytest.mark.parametrize("fake_server", ["28P01"], indirect=True)
async def test_a_refusal_that_is_no_outage_is_not_unavailable(fake_server: FakeServer) -> None:
    """Wrong credentials (28P01) are not an outage: retrying will not help."""
    storage = SessionStorage(f"postgresql://opensquilla@127.0.0.1:{fake_server.port}/store")
    with pytest.raises(DatabaseError) as caught:
        await storage.connect()
    assert not isinstance(caught.value, DatabaseUnavailableError)


class _DriverError(Exception):
    def __init__(self, sqlstate: str) -> None:
        super().__init__(f"driver error {sqlstate}")
        self.sqlstate = sqlstate


@pytest.mark.parametrize("sqlstate", [*OUTAGE_CODES, "57P05", "25P03", "08003"])
def test_outage_sqlstates_on_an_established_connection_are_unavailable(sqlstate: str) -> None:
    for kind in (sa_exc.OperationalError, sa_exc.DBAPIError, sa_exc.ProgrammingError):
        error = kind("SELECT 1", {}, _DriverError(sqlstate))
        assert isinstance(translate(error), DatabaseUnavailableError), (kind, sqlstate)


@pytest.mark.parametrize("sqlstate", NOT_AN_OUTAGE)
def test_other_sqlstates_stay_plain_database_errors(sqlstate: str) -> None:
    translated = translate(sa_exc.OperationalError("SELECT 1", {}, _DriverError(sqlstate)))
    assert isinstance(translated, DatabaseError)
    assert not isinstance(translated, DatabaseUnavailableError)
