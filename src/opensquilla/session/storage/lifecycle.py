"""The engine's lifecycle moved to the persistence layer (``db/lifecycle.py``); the storage
mixins build on it from here."""

from __future__ import annotations

from ..db.lifecycle import StorageLifecycle as StorageLifecycle
from ..db.lifecycle import StorageNotConnectedError as StorageNotConnectedError
