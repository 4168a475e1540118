"""Where the LLM summariser (``llm.py``) sends its requests: :class:`LLMSettings`, read from
the environment (``OPENSQUILLA_SESSION_LLM_*``), the CLI's ``--llm-*`` options or code, and
checked once when built (``ConfigurationError`` naming the variable or option). The API key
is never a setting: only the name of the environment variable that holds it."""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from .config import mask_password
from .errors import ConfigurationError


def chat_completions_url(base_url: str) -> str:
    base = base_url.rstrip("/")
    if not base.endswith("/v1"):
        base += "/v1"
    return base + "/chat/completions"


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
