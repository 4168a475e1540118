"""The OpenAI Agents SDK integration: :class:`OpenSquillaSession`, a session backend
(``agents.memory.session.SessionABC``) kept in this store (docs/integrations-openai-agents.md).

Needs the ``openai-agents`` package: ``pip install 'opensquilla-session[openai-agents]'``;
without it, importing this module raises ``ImportError`` naming that extra.
"""

from __future__ import annotations

from .._shared import require_framework

require_framework("agents", extra="openai-agents", framework="OpenAI Agents SDK")

from .items import ITEM_KEY  # noqa: E402
from .keys import NAMESPACE, parse_session_key, session_key  # noqa: E402
from .session import DEFAULT_COMPACTION, OpenSquillaSession  # noqa: E402

__all__ = [
    "DEFAULT_COMPACTION",
    "ITEM_KEY",
    "NAMESPACE",
    "OpenSquillaSession",
    "parse_session_key",
    "session_key",
]
