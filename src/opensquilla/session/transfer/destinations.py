"""Where an export may be written, and how, so that writing it never destroys anything.

The store's own files (its database, ``-wal``, ``-shm``, ``-journal``, however they are
reached) and any other SQLite database are refused, as are directories and block devices.
A FIFO, a character device (``/dev/null``) or a descriptor (``/dev/stdout``) is written
straight through; a regular file is replaced whole (by :mod:`.exchange`).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import IO, Literal

from ..errors import InvalidInputError

DestinationKind = Literal["stream", "file"]

_SQLITE_MAGIC = b"SQLite format 3\x00"
_STORE_FILE_SUFFIXES = ("", "-wal", "-shm", "-journal")
# Paths that name one of this process's open descriptors: written through a duplicate of
# the descriptor, so a redirect's offset and append mode are kept (reopening
# /proc/self/fd/1 would truncate a file the shell opened with >>).
_DESCRIPTOR_ALIASES = {"/dev/stdin": 0, "/dev/stdout": 1, "/dev/stderr": 2}
_DESCRIPTOR_PREFIXES = ("/dev/fd/", "/proc/self/fd/")
_SYSTEM_DIRECTORIES = ("/dev/", "/proc/", "/sys/")


def _descriptor_alias(path: Path) -> int | None:
    text = str(path)
    if text in _DESCRIPTOR_ALIASES:
        return _DESCRIPTOR_ALIASES[text]
    for prefix in _DESCRIPTOR_PREFIXES:
        if text.startswith(prefix) and text[len(prefix) :].isdigit():
            return int(text[len(prefix) :])
    return None


def _refuse_store_files(destination: Path, database: Path | None) -> None:
    """Refuse a destination that is the store's own database or one of its companion files
    (``-wal``, ``-shm``, ``-journal``), by name through symlinks or by inode (a hard link):
    replacing it with an export would destroy the store."""
    if database is None:
        return
    real = os.path.realpath(destination)
    try:
        given = os.stat(destination)
    except OSError:
        given = None
    for suffix in _STORE_FILE_SUFFIXES:
        own = database.with_name(database.name + suffix)
        same = real == os.path.realpath(own)
        if not same and given is not None:
            try:
                found = os.stat(own)
            except OSError:
                continue
            same = (found.st_dev, found.st_ino) == (given.st_dev, given.st_ino)
        if same:
            raise InvalidInputError(
                f"refusing to export to {destination}: it is this store's own database file "
                f"{own}; write the export somewhere else"
            )


def _is_sqlite_database(path: str) -> bool:
    try:
        with open(path, "rb") as stream:
            return stream.read(len(_SQLITE_MAGIC)) == _SQLITE_MAGIC
    except OSError:
        return False


def _destination_kind(destination: Path) -> DestinationKind:
    """``"stream"`` (write straight through: a FIFO, a character device such as /dev/null,
    a descriptor alias such as /dev/stdout) or ``"file"`` (a regular file, new or not:
    written to a temporary file and renamed into place). Anything else is refused."""
    if _descriptor_alias(destination) is not None:
        return "stream"
    try:
        found = os.stat(destination)  # through symlinks: what the data would land in
    except FileNotFoundError:
        return "file"
    mode = found.st_mode
    if stat.S_ISFIFO(mode) or stat.S_ISCHR(mode):
        return "stream"
    if os.path.realpath(destination).startswith(_SYSTEM_DIRECTORIES) and stat.S_ISREG(mode):
        # Never create or rename files among the system's devices, whatever is there.
        return "stream"
    if stat.S_ISDIR(mode):
        raise InvalidInputError(f"cannot export to {destination}: it is a directory")
    if not stat.S_ISREG(mode):
        kind = "a block device" if stat.S_ISBLK(mode) else "not a regular file, FIFO or device"
        raise InvalidInputError(f"refusing to export to {destination}: it is {kind}")
    if _is_sqlite_database(str(destination)):
        raise InvalidInputError(
            f"refusing to export to {destination}: it is a SQLite database, which an export "
            "would destroy; write the export somewhere else"
        )
    return "file"


def open_stream(destination: Path) -> IO[bytes]:
    """The destination opened for writing as it is: no temporary file, no rename; a
    descriptor's file keeps its offset and append mode (a FIFO open waits for its
    reader)."""
    alias = _descriptor_alias(destination)
    if alias is not None:
        return os.fdopen(os.dup(alias), "wb")
    # O_TRUNC does nothing to a FIFO or a device; it empties a regular file among /dev.
    return os.fdopen(os.open(destination, os.O_WRONLY | os.O_TRUNC), "wb")


def prepare(path: Path | str, database: Path | None) -> tuple[DestinationKind, Path]:
    """``(kind, where to write)``: the destination checked (:func:`_refuse_store_files`,
    :func:`_destination_kind`); a file's path resolved through symlinks, so that a symlink
    to it stays a symlink."""
    destination = Path(path).expanduser()
    _refuse_store_files(destination, database)
    kind = _destination_kind(destination)
    return kind, destination if kind == "stream" else Path(os.path.realpath(destination))
