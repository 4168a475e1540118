"""The ``alembic`` command line's side of the migrations (alembic/env.py): the DSN it is
given, its errors, and its runs under the same lock as a run from code (``migrate``)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator, Mapping

from alembic.util import CommandError
from sqlalchemy.engine import Connection

from ..config import mask_password, resolve_dsn
from ..errors import SessionStoreError
from ..fs.files import ensure_private_file
from .dsn import parse_target
from .engine import create_engine
from .migrate import run_locked


def cli_dsn(x_arguments: Mapping[str, str]) -> str:
    """The DSN for the ``alembic`` command line: ``-x dsn=...``, the env variable, the default."""
    return resolve_dsn(x_arguments.get("dsn"), given_as="-x dsn=")


@contextlib.contextmanager
def cli_errors() -> Iterator[None]:
    """For the ``alembic`` command line: the package's own errors (a refused adoption, a
    bad DSN) become Alembic's ``CommandError``, which it prints as one ``FAILED:`` line
    with exit status 255, instead of a traceback. The message never carries a password."""
    try:
        yield
    except SessionStoreError as exc:
        raise CommandError(mask_password(" ".join(str(exc).split()))) from exc


def run_from_cli(x_arguments: Mapping[str, str], fn: Callable[[Connection], None]) -> None:
    """Run migrations for the ``alembic`` command line, with the same locking as code."""
    with cli_errors():
        target = parse_target(cli_dsn(x_arguments))
        if target.path is not None:
            ensure_private_file(target.path)

        async def main() -> None:
            engine = create_engine(target)
            try:
                await run_locked(engine, fn)
            finally:
                await engine.dispose()

        asyncio.run(main())
