"""Session backends for agent frameworks, over this store (docs/integrations.md).

- :mod:`opensquilla.session.integrations.openai_agents`: ``OpenSquillaSession``, an OpenAI
  Agents SDK session (extra ``opensquilla-session[openai-agents]``);
- :mod:`opensquilla.session.integrations.google_adk`: ``OpenSquillaSessionService``, a
  Google ADK session service (extra ``opensquilla-session[google-adk]``).

Importing this package imports no framework; importing one of the modules without its
framework installed raises ``ImportError`` naming the extra to install.
"""
