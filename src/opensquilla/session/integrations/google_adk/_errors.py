"""The error ADK's own services raise for a stale session object, as they raise it."""

from __future__ import annotations

from google.adk.errors import StaleSessionError

# DatabaseSessionService's message, word for word.
STALE_SESSION_MESSAGE = (
    "The session has been modified in storage since it was loaded. "
    "Please reload the session before appending more events."
)


def stale_session() -> StaleSessionError:
    """A :class:`~google.adk.errors.StaleSessionError` (a ``ValueError``) with ADK's
    message."""
    return StaleSessionError(STALE_SESSION_MESSAGE)


__all__ = ["STALE_SESSION_MESSAGE", "StaleSessionError", "stale_session"]
