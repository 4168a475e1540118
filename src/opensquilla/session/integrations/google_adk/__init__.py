"""Google ADK on this store: ``OpenSquillaSessionService``, a ``BaseSessionService``
(docs/integrations-google-adk.md).

Needs the ``google-adk`` package: ``pip install 'opensquilla-session[google-adk]'``;
importing this module without it raises ``ImportError`` naming that extra.
"""

from __future__ import annotations

from .._shared import require_framework

require_framework("google.adk", extra="google-adk", framework="Google ADK")

from ._errors import StaleSessionError  # noqa: E402
from ._keys import AdkSessionAddress, parse_session_key  # noqa: E402
from ._service import OpenSquillaSessionService  # noqa: E402

__all__ = [
    "AdkSessionAddress",
    "OpenSquillaSessionService",
    "StaleSessionError",
    "parse_session_key",
]
