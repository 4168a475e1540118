"""Owner-only files: the embedded database and the reset archives hold whole conversations.

Directories the store creates are 0700 and files 0600 whatever the umask. A directory that
already exists is left as it is (it may be shared on purpose, like ``/tmp``).
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from pathlib import Path

DIR_MODE = 0o700
FILE_MODE = 0o600


def ensure_private_dir(path: Path) -> None:
    """Create ``path`` and its missing parents owner-only; refuse a non-directory."""
    missing: list[Path] = []
    current = path
    while not current.exists() and current.parent != current:
        missing.append(current)
        current = current.parent
    for directory in reversed(missing):
        try:
            directory.mkdir(mode=DIR_MODE)
        except FileExistsError:
            continue
        os.chmod(directory, DIR_MODE)
    if not path.is_dir():
        raise NotADirectoryError(f"not a directory: {path}")


def ensure_private_file(path: Path) -> None:
    """Create ``path`` empty and 0600 if it does not exist (SQLite would follow the umask;
    it gives its ``-wal`` and ``-shm`` files the main file's permissions)."""
    ensure_private_dir(path.parent)
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, FILE_MODE)
    except FileExistsError:
        return
    os.close(fd)
    os.chmod(path, FILE_MODE)


@dataclass(frozen=True)
class StagedFile:
    """A complete, fsynced file under a temporary name, waiting to be published."""

    temporary: Path
    final: Path

    def publish(self) -> Path:
        """Rename into place and fsync the directory: readers see all of it or nothing."""
        os.replace(self.temporary, self.final)
        dir_fd = os.open(self.final.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
        return self.final

    def discard(self) -> None:
        self.temporary.unlink(missing_ok=True)


def stage_file(directory: Path, name: str, data: bytes) -> StagedFile:
    """Write ``data`` owner-only to a temporary file beside ``directory/name`` and fsync it."""
    ensure_private_dir(directory)
    temporary = directory / f".{name}.{uuid.uuid4().hex}.tmp"
    fd = os.open(temporary, os.O_CREAT | os.O_EXCL | os.O_WRONLY, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        temporary.unlink(missing_ok=True)
        raise
    os.close(fd)
    return StagedFile(temporary, directory / name)
