"""Where one store's reset archives go: the store's setting, the directory setting and the
name its files carry (docs/semantics.md#reset-archive). Built by the storage once, handed
to the use cases that write or count archives; the directory is resolved at each use
(``$OPENSQUILLA_SESSION_ARCHIVE_DIR`` may change between resets)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..config import ArchiveStore, archive_directory


@dataclass(frozen=True)
class ArchivePlace:
    """``store``: ``"files"`` or ``"database"``; ``directory_setting``: the ``archive_dir``
    the storage was given (``None``: the environment's, else the home's); ``tag``: the name
    this store's archive files carry (``SessionStorage.archive_store_tag``)."""

    store: ArchiveStore
    directory_setting: str | os.PathLike[str] | None
    tag: str

    def directory(self) -> Path:
        """The directory of archive files, resolved now."""
        return archive_directory(self.directory_setting)
