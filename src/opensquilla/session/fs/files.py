"""Owner-only files: the embedded database and the reset archives hold whole conversations.

Directories the store creates are 0700 and files 0600 whatever the umask. A directory that
already exists is left as it is (it may be shared on purpose, like ``/tmp``).

Staged files are written under a hidden temporary name, fsynced, and renamed into place
only when the change they belong to has committed; their writer holds a lock on them until
then, so a later process can tell one left behind by a crash from one still in flight.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None  # type: ignore[assignment]

# Whether a staged file's writer holds a lock a later process can test (POSIX ``flock``).
CAN_LOCK = fcntl is not None

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
            continue  # another process created it: not ours to change
        _restrict(directory)
    if not path.is_dir():
        raise NotADirectoryError(f"not a directory: {path}")


def _restrict(directory: Path) -> None:
    """0700 for a directory this process just created (``mkdir``'s mode is cut by the umask).
    Skipped on Windows, where a mode is only a read-only flag; a file system that refuses
    modes is not a reason to fail (what ``mkdir`` gave it stays)."""
    if os.name == "nt":  # pragma: no cover - not POSIX
        return
    try:
        os.chmod(directory, DIR_MODE)
    except OSError:
        return


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


class StagedFile:
    """A complete, fsynced file under a temporary name, waiting to be published.

    While the staging process holds it, the file is locked (``flock``, released by the
    kernel if the process dies): :func:`lock_staged` tells a file some live writer still
    owns from one left behind by a crash. Every path ends in :meth:`publish`,
    :meth:`discard` or :meth:`release`, each of which drops the lock.
    """

    __slots__ = ("_lock_fd", "_published", "final", "temporary")

    def __init__(self, temporary: Path, final: Path, lock_fd: int | None = None) -> None:
        self.temporary = temporary
        self.final = final
        self._lock_fd = lock_fd
        self._published = False

    def __repr__(self) -> str:
        return f"StagedFile({str(self.temporary)!r} -> {str(self.final)!r})"

    @property
    def published(self) -> bool:
        """Whether it has been renamed into place (by :meth:`publish`)."""
        return self._published

    @property
    def path(self) -> Path:
        """Where the file is now: its final name once published, else the temporary one."""
        return self.final if self._published else self.temporary

    def publish(self) -> Path:
        """Rename into place and fsync the directory: readers see all of it or nothing.
        Publishing a published file again does nothing."""
        if self._published:
            return self.final
        try:
            os.replace(self.temporary, self.final)
            self._published = True
            dir_fd = os.open(self.final.parent, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        except OSError:
            self.release()
            raise
        self.release()
        return self.final

    def discard(self) -> None:
        """Remove the file, under whichever name it has now (its change did not happen)."""
        self.path.unlink(missing_ok=True)
        self.release()

    def label(self, tag: str) -> None:
        """Add ``tag`` to the temporary name (``.<name>.<random>.<tag>.tmp``): whose file
        it is, for a recovery after a crash. Best effort: a file that keeps its plain
        temporary name is only reported, never settled, by a recovery."""
        labelled = self.temporary.with_name(f"{self.temporary.name[: -len('.tmp')]}.{tag}.tmp")
        try:
            os.rename(self.temporary, labelled)
        except OSError:
            return
        self.temporary = labelled

    def release(self) -> None:
        """Drop the lock and keep the file where it is (for a later recovery to settle)."""
        fd, self._lock_fd = self._lock_fd, None
        if fd is not None:
            os.close(fd)


def _lock(fd: int, *, wait: bool) -> bool:
    """An exclusive ``flock`` on ``fd``; ``False`` when another holder has it (only
    without ``wait``). Where there is no ``flock``, nothing is locked (``True``)."""
    if fcntl is None:  # pragma: no cover - not POSIX
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def stage_file(directory: Path, name: str, data: bytes) -> StagedFile:
    """Write ``data`` owner-only to a temporary file beside ``directory/name`` and fsync it;
    the file stays locked (see :class:`StagedFile`) until it is published or discarded."""
    ensure_private_dir(directory)
    temporary = directory / f".{name}.{uuid.uuid4().hex}.tmp"
    fd = os.open(temporary, os.O_CREAT | os.O_EXCL | os.O_WRONLY, FILE_MODE)
    try:
        _lock(fd, wait=True)  # a recovery scan may hold it for a moment; it finds it empty
        os.fchmod(fd, FILE_MODE)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        temporary.unlink(missing_ok=True)
        raise
    return StagedFile(temporary, directory / name, fd)


def write_private_file(directory: Path, name: str, data: bytes) -> Path:
    """Write ``data`` owner-only to ``directory/name`` at once: staged (:func:`stage_file`:
    written and fsynced under a temporary name), renamed into place, directory fsynced.
    Any failure removes what was written, under either name, and raises."""
    staged = stage_file(directory, name, data)
    try:
        return staged.publish()
    except BaseException:
        staged.discard()
        raise


def lock_staged(path: Path, final: Path) -> StagedFile | None:
    """Take over the staged file ``path`` (to be published as ``final``) if no live process
    holds it: its writer died, or gave up on it. ``None`` when a writer still holds it or
    it is gone. The caller settles it: ``publish``, ``discard`` or ``release``."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        if not _lock(fd, wait=False):
            os.close(fd)
            return None
        # Renamed or removed while we waited for the lock: not a staged file any more.
        if os.fstat(fd).st_ino != os.stat(path).st_ino:
            os.close(fd)
            return None
    except OSError:
        os.close(fd)
        return None
    return StagedFile(path, final, fd)
