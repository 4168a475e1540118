"""The two ways moving sessions fails, besides the store's own errors."""

from __future__ import annotations

from ..errors import SessionStoreError


class ExportFormatError(SessionStoreError, ValueError):
    """A file that is not a complete, valid export this version can read, or a value the
    export format cannot carry."""


class TransferError(SessionStoreError):
    """A session could not be moved to the target (nothing of that session was written)."""
