"""An LLM summariser for OpenAI-compatible chat endpoints (optional extra: ``[llm]``).

Any failure (no httpx, a timeout, an HTTP error, an unexpected body) returns ``None``, and
the compaction uses the deterministic fallback for that chunk. It runs outside any database
transaction.

Configured either through a :class:`CompactionConfig` (``api_key`` and ``model`` set: the
manager builds one on its own), or, independently of that config, from an
:class:`LLMSettings` (:meth:`OpenAICompatibleSummarizer.from_settings`), which reads the
environment (``OPENSQUILLA_SESSION_LLM_*``) or takes the CLI's ``--llm-*`` options. The API
key is only ever read from an environment variable (or handed in by code), and never shown:
not in a repr, an error message or a log line.
"""

from __future__ import annotations

import logging
import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from .compaction import CompactionConfig
from .compaction.fallback import IDENTIFIER_INSTRUCTION
from .config import mask_password
from .errors import ConfigurationError

log = logging.getLogger(__name__)

SYSTEM_PROMPT = (
    "You are a conversation compactor. Summarise the conversation so that an agent can continue "
    "the task from your summary alone: the user's goal and constraints, decisions and their "
    "reasons, what was done and what failed, open questions and the next step. Be concise."
)
MAX_MESSAGE_CHARS = 4000


def chat_completions_url(base_url: str) -> str:
    base = base_url.rstrip("/")
    if not base.endswith("/v1"):
        base += "/v1"
    return base + "/chat/completions"


def format_chunk(chunk: Sequence[Mapping[str, Any]]) -> str:
    """The chunk as text for the model; tool payloads are named, not dumped."""
    lines = []
    for entry in chunk:
        content = str(entry.get("content") or "")
        if len(content) > MAX_MESSAGE_CHARS:
            content = content[:MAX_MESSAGE_CHARS] + "..."
        calls = entry.get("tool_calls") or []
        names = [
            str(call.get("name") or (call.get("function") or {}).get("name") or call.get("type"))
            for call in calls
            if isinstance(call, Mapping)
        ]
        suffix = f" [tool_call: {', '.join(names)}]" if names else ""
        lines.append(f"[{entry.get('role')}]: {content}{suffix}")
    return "\n".join(lines)


def build_request(
    chunk: Sequence[Mapping[str, Any]],
    config: CompactionConfig,
    custom_instructions: str | None,
    *,
    model: str | None = None,
) -> dict[str, Any]:
    """The chat-completions body; ``model`` (from :class:`LLMSettings`) overrides
    ``config.model``."""
    system = SYSTEM_PROMPT
    if config.identifier_policy == "strict":
        system += "\n" + IDENTIFIER_INSTRUCTION
    if custom_instructions:
        system += "\nAdditional instructions: " + custom_instructions
    return {
        "model": model if model is not None else config.model,
        "messages": [
            {"role": "system", "content": system},
            {"role": "user", "content": "Summarize this conversation:\n" + format_chunk(chunk)},
        ],
        "max_tokens": 1024,
        "temperature": 0,
        "stream": False,
    }


# -- settings: environment, CLI options, code ---------------------------------------------

BASE_URL_ENV = "OPENSQUILLA_SESSION_LLM_BASE_URL"
MODEL_ENV = "OPENSQUILLA_SESSION_LLM_MODEL"
API_KEY_ENV = "OPENSQUILLA_SESSION_LLM_API_KEY"
API_KEY_ENV_ENV = "OPENSQUILLA_SESSION_LLM_API_KEY_ENV"
TIMEOUT_ENV = "OPENSQUILLA_SESSION_LLM_TIMEOUT"
DEFAULT_TIMEOUT_SECONDS = 90.0
MAX_TIMEOUT_SECONDS = 3600.0
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: How each setting is named in messages when it came from the environment.
_ENV_FOR = {
    "base_url": BASE_URL_ENV,
    "model": MODEL_ENV,
    "api_key_env": API_KEY_ENV_ENV,
    "timeout_seconds": TIMEOUT_ENV,
}


def _shown(text: str, limit: int = 80) -> str:
    """A value for a message: passwords masked, shortened."""
    masked = mask_password(text)
    return repr(masked) if len(masked) <= limit else repr(masked[:limit] + "...")


def _check_base_url(value: object, label: str) -> str:
    if not isinstance(value, str):
        raise ConfigurationError(f"{label} must be a string, not {type(value).__name__}")
    url = value.strip()
    if not url:
        raise ConfigurationError(
            f"{label} is empty: give the endpoint, e.g. http://127.0.0.1:8000/v1"
        )
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (a bad port raises here)
    except ValueError:
        raise ConfigurationError(f"{label} is not a valid URL: {_shown(url)}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigurationError(
            f"{label} must be an http:// or https:// URL with a host, not {_shown(url)}"
        )
    if parts.username is not None or parts.password is not None:
        raise ConfigurationError(
            f"{label} must not hold credentials: put the API key in an environment variable "
            f"(${API_KEY_ENV}, or the one ${API_KEY_ENV_ENV} names)"
        )
    if parts.query or parts.fragment or any(ch.isspace() for ch in url):
        raise ConfigurationError(
            f"{label} must be a plain endpoint URL (no query, fragment or spaces), not "
            f"{_shown(url)}"
        )
    return url


def _check_model(value: object, label: str) -> str:
    if not isinstance(value, str):
        raise ConfigurationError(f"{label} must be a string, not {type(value).__name__}")
    model = value.strip()
    if not model:
        raise ConfigurationError(f"{label} is empty: name the model, e.g. gpt-4o-mini")
    if len(model) > 256 or any(not ch.isprintable() for ch in model):
        raise ConfigurationError(f"{label} is not a model name: {_shown(model)}")
    return model


def _check_env_name(value: object, label: str) -> str:
    if not isinstance(value, str) or not _ENV_NAME.match(value.strip()):
        # Never show the value: the likeliest mistake is the key itself given here.
        kind = f"{len(value)} characters" if isinstance(value, str) else type(value).__name__
        raise ConfigurationError(
            f"{label} must name an environment variable (letters, digits and _, not starting "
            f"with a digit), not the key itself or other text ({kind}, not shown)"
        )
    return value.strip()


def _check_timeout(value: object, label: str) -> float:
    if isinstance(value, str):
        try:
            seconds = float(value.strip())
        except ValueError:
            raise ConfigurationError(
                f"{label} must be a number of seconds, not {_shown(value)}"
            ) from None
    elif isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    else:
        raise ConfigurationError(f"{label} must be a number of seconds, not {type(value).__name__}")
    if not math.isfinite(seconds) or not 0 < seconds <= MAX_TIMEOUT_SECONDS:
        raise ConfigurationError(
            f"{label} must be a number of seconds in (0, {MAX_TIMEOUT_SECONDS:g}], not "
            f"{_shown(str(value))}"
        )
    return seconds


@dataclass(frozen=True)
class LLMSettings:
    """Where the LLM summariser sends its requests.

    ``base_url``: the OpenAI-compatible endpoint (``/v1`` is added when missing);
    ``model``: the model name sent with every request; ``api_key_env``: the environment
    variable holding the API key (the key itself is never a setting); ``timeout_seconds``:
    per request. Values are checked at construction (``ConfigurationError`` naming the
    setting).
    """

    base_url: str
    model: str
    api_key_env: str = API_KEY_ENV
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS

    def __post_init__(self) -> None:
        object.__setattr__(self, "base_url", _check_base_url(self.base_url, "base_url"))
        object.__setattr__(self, "model", _check_model(self.model, "model"))
        object.__setattr__(self, "api_key_env", _check_env_name(self.api_key_env, "api_key_env"))
        object.__setattr__(
            self, "timeout_seconds", _check_timeout(self.timeout_seconds, "timeout_seconds")
        )

    @property
    def endpoint(self) -> str:
        """The URL requests go to."""
        return chat_completions_url(self.base_url)

    @classmethod
    def from_env(
        cls,
        environ: Mapping[str, str] | None = None,
        *,
        base_url: str | None = None,
        model: str | None = None,
        api_key_env: str | None = None,
        timeout_seconds: str | float | None = None,
        names: Mapping[str, str] | None = None,
    ) -> LLMSettings | None:
        """The settings from ``environ`` (default ``os.environ``), each overridden by the
        matching keyword when that is not ``None`` (the CLI's ``--llm-*`` options).

        ``None`` when no base URL is configured: compaction then uses the deterministic
        fallback. A base URL without a model, a bad URL, a timeout that is not a positive
        number are refused with a ``ConfigurationError`` naming the variable or option
        (``names`` maps a keyword to the option it came from, e.g. ``--llm-model``). An
        override given but empty (an unset shell variable) is refused, never skipped.
        """
        env = os.environ if environ is None else environ
        given = {
            "base_url": base_url,
            "model": model,
            "api_key_env": api_key_env,
            "timeout_seconds": timeout_seconds,
        }
        labels = dict(names or {})
        values: dict[str, object] = {}
        where: dict[str, str] = {}
        for name, explicit in given.items():
            if explicit is not None:
                values[name] = explicit
                where[name] = labels.get(name, name)
                if isinstance(explicit, str) and not explicit.strip():
                    raise ConfigurationError(
                        f"{where[name]} was given but is empty (an unset variable?); "
                        f"give a value, or leave it out to use ${_ENV_FOR[name]}"
                    )
            else:
                configured = env.get(_ENV_FOR[name], "").strip()
                if configured:
                    values[name] = configured
                    where[name] = "$" + _ENV_FOR[name]
        if "base_url" not in values:
            stray = [where[name] for name in given if given[name] is not None]
            if stray:
                raise ConfigurationError(
                    f"{', '.join(stray)} given without a base URL: set "
                    f"{labels.get('base_url', 'base_url')} or ${BASE_URL_ENV} to use an LLM "
                    "summariser"
                )
            return None
        url = _check_base_url(values["base_url"], where["base_url"])
        if "model" not in values:
            raise ConfigurationError(
                f"an LLM base URL is set ({where['base_url']}) but no model: set "
                f"{labels.get('model', 'model')} or ${MODEL_ENV}"
            )
        return cls(
            base_url=url,
            model=_check_model(values["model"], where["model"]),
            api_key_env=_check_env_name(
                values.get("api_key_env", API_KEY_ENV), where.get("api_key_env", "api_key_env")
            ),
            timeout_seconds=_check_timeout(
                values.get("timeout_seconds", DEFAULT_TIMEOUT_SECONDS),
                where.get("timeout_seconds", "timeout_seconds"),
            ),
        )


class OpenAICompatibleSummarizer:
    """Summarises each chunk through ``POST <base_url>/v1/chat/completions``.

    Built bare (``OpenAICompatibleSummarizer()``), it takes the endpoint, model, key and
    timeout from each call's :class:`CompactionConfig` and only calls when
    ``config.llm_enabled``. Built with :meth:`from_settings`, it uses its settings and
    ignores those config fields.
    """

    source = "llm"

    def __init__(
        self,
        *,
        transport: Any | None = None,
        settings: LLMSettings | None = None,
        api_key: str = "",
    ) -> None:
        if settings is not None and not isinstance(settings, LLMSettings):
            raise ConfigurationError(
                f"settings must be an LLMSettings or None, not {type(settings).__name__}"
            )
        if not isinstance(api_key, str):
            raise ConfigurationError(f"api_key must be a string, not {type(api_key).__name__}")
        self._transport = transport  # an httpx transport, for tests
        self._settings = settings
        self._api_key = api_key

    @classmethod
    def from_settings(
        cls,
        settings: LLMSettings,
        *,
        api_key: str | None = None,
        environ: Mapping[str, str] | None = None,
        transport: Any | None = None,
    ) -> OpenAICompatibleSummarizer:
        """A summariser for ``settings``; the key is ``api_key`` if given, else read now
        from the variable ``settings.api_key_env`` names (in ``environ``, default
        ``os.environ``).

        With the default variable unset, requests go without an ``Authorization`` header
        (local servers need none); a variable named on purpose (``api_key_env``) that is
        unset or empty is refused, since the requests would then fail one by one.
        """
        if not isinstance(settings, LLMSettings):
            raise ConfigurationError(
                f"settings must be an LLMSettings, not {type(settings).__name__}"
            )
        if api_key is None:
            env = os.environ if environ is None else environ
            api_key = env.get(settings.api_key_env, "").strip()
            if not api_key and settings.api_key_env != API_KEY_ENV:
                raise ConfigurationError(
                    f"the API key variable ${settings.api_key_env} is not set or empty (it is "
                    f"named by api_key_env, --llm-api-key-env or ${API_KEY_ENV_ENV}; unset "
                    f"that to use ${API_KEY_ENV})"
                )
        return cls(transport=transport, settings=settings, api_key=api_key)

    @property
    def settings(self) -> LLMSettings | None:
        return self._settings

    def __repr__(self) -> str:
        # Never the key: only whether there is one.
        key = "set" if self._api_key else "none"
        return f"OpenAICompatibleSummarizer(settings={self._settings!r}, api_key={key})"

    def describe(self) -> dict[str, Any]:
        """What an operator may see: the kind, endpoint, model and timeout (never the key)."""
        if self._settings is None:
            return {"kind": "llm", "configured_by": "CompactionConfig"}
        return {
            "kind": "llm",
            "endpoint": self._settings.endpoint,
            "model": self._settings.model,
            "timeout_seconds": self._settings.timeout_seconds,
            "api_key_env": self._settings.api_key_env,
            "api_key_set": bool(self._api_key),
        }

    async def summarize(
        self,
        chunk: Sequence[Mapping[str, Any]],
        *,
        config: CompactionConfig,
        custom_instructions: str | None,
    ) -> str | None:
        if self._settings is not None:
            url = self._settings.endpoint
            model: str | None = self._settings.model
            api_key = self._api_key
            timeout = self._settings.timeout_seconds
        elif config.llm_enabled:
            url = chat_completions_url(config.base_url)
            model = config.model
            api_key = config.api_key
            timeout = config.timeout_seconds
        else:
            return None
        try:
            import httpx
        except ImportError:
            log.warning(
                "httpx is not installed (pip install 'opensquilla-session[llm]'); "
                "using the fallback summary",
                extra={"operation": "summarize"},
            )
            return None
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        try:
            async with httpx.AsyncClient(timeout=timeout, transport=self._transport) as client:
                response = await client.post(
                    url,
                    json=build_request(chunk, config, custom_instructions, model=model),
                    headers=headers,
                )
                response.raise_for_status()
                text = response.json()["choices"][0]["message"]["content"]
        except Exception as exc:  # any failure means: fall back for this chunk
            # Only the kind and the status: an exception's text may quote the request.
            status = getattr(getattr(exc, "response", None), "status_code", None)
            log.warning(
                "LLM summariser failed (%s%s); using the fallback summary",
                type(exc).__name__,
                f", HTTP {status}" if isinstance(status, int) else "",
                extra={"operation": "summarize"},
            )
            return None
        return text.strip() if isinstance(text, str) and text.strip() else None
