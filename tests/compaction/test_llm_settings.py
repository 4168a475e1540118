"""LLMSettings: from the environment, overridden by options, refused with a message naming
the setting (never showing the key); OpenAICompatibleSummarizer.from_settings reads the key
from the variable the settings name."""

from __future__ import annotations

import dataclasses

import pytest

from opensquilla.session.errors import ConfigurationError
from opensquilla.session.llm import (
    API_KEY_ENV,
    DEFAULT_TIMEOUT_SECONDS,
    LLMSettings,
    OpenAICompatibleSummarizer,
)

SECRET = "sk-settings-0123456789-very-secret"
BASE = {
    "OPENSQUILLA_SESSION_LLM_BASE_URL": "http://127.0.0.1:8000",
    "OPENSQUILLA_SESSION_LLM_MODEL": "acme/compact-1",
}


def test_from_env_reads_every_variable() -> None:
    settings = LLMSettings.from_env(
        {
            **BASE,
            "OPENSQUILLA_SESSION_LLM_API_KEY_ENV": "ACME_KEY",
            "OPENSQUILLA_SESSION_LLM_TIMEOUT": " 2.5 ",
        }
    )

    assert settings == LLMSettings(
        base_url="http://127.0.0.1:8000",
        model="acme/compact-1",
        api_key_env="ACME_KEY",
        timeout_seconds=2.5,
    )
    assert settings.endpoint == "http://127.0.0.1:8000/v1/chat/completions"


def test_from_env_defaults() -> None:
    settings = LLMSettings.from_env(BASE)

    assert settings is not None
    assert settings.api_key_env == API_KEY_ENV == "OPENSQUILLA_SESSION_LLM_API_KEY"
    assert settings.timeout_seconds == DEFAULT_TIMEOUT_SECONDS


def test_no_base_url_means_no_llm() -> None:
    assert LLMSettings.from_env({}) is None
    assert LLMSettings.from_env({"OPENSQUILLA_SESSION_LLM_BASE_URL": "  "}) is None
    # a model in the environment alone does not switch anything on
    assert LLMSettings.from_env({"OPENSQUILLA_SESSION_LLM_MODEL": "m"}) is None


def test_explicit_values_override_the_environment() -> None:
    settings = LLMSettings.from_env(
        BASE, base_url="https://llm.example/api/v1", model="other", timeout_seconds="7"
    )

    assert settings is not None
    assert (settings.base_url, settings.model, settings.timeout_seconds) == (
        "https://llm.example/api/v1",
        "other",
        7.0,
    )


def test_frozen() -> None:
    settings = LLMSettings(base_url="http://h", model="m")
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.model = "x"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("environ", "overrides", "names", "message"),
    [
        (
            {"OPENSQUILLA_SESSION_LLM_BASE_URL": "http://h"},
            {},
            {},
            "OPENSQUILLA_SESSION_LLM_BASE_URL) but no model: set model or "
            "$OPENSQUILLA_SESSION_LLM_MODEL",
        ),
        (
            {},
            {"base_url": "http://h"},
            {"base_url": "--llm-base-url", "model": "--llm-model"},
            "(--llm-base-url) but no model: set --llm-model",
        ),
        (
            {**BASE, "OPENSQUILLA_SESSION_LLM_BASE_URL": "ftp://h"},
            {},
            {},
            "$OPENSQUILLA_SESSION_LLM_BASE_URL must be an http:// or https:// URL",
        ),
        (
            {**BASE, "OPENSQUILLA_SESSION_LLM_BASE_URL": "127.0.0.1:8000"},
            {},
            {},
            "$OPENSQUILLA_SESSION_LLM_BASE_URL must be an http:// or https:// URL",
        ),
        (
            BASE,
            {"base_url": "http://h:99999"},
            {"base_url": "--llm-base-url"},
            "--llm-base-url is not a valid URL",
        ),
        (
            {**BASE, "OPENSQUILLA_SESSION_LLM_TIMEOUT": "soon"},
            {},
            {},
            "$OPENSQUILLA_SESSION_LLM_TIMEOUT must be a number of seconds, not 'soon'",
        ),
        (
            BASE,
            {"timeout_seconds": "-1"},
            {"timeout_seconds": "--llm-timeout"},
            "--llm-timeout must be a number of seconds in (0, 3600]",
        ),
        (BASE, {"timeout_seconds": "nan"}, {}, "timeout_seconds must be a number of seconds in"),
        (BASE, {"model": ""}, {"model": "--llm-model"}, "--llm-model was given but is empty"),
        (
            {},
            {"model": "m"},
            {"model": "--llm-model", "base_url": "--llm-base-url"},
            "--llm-model given without a base URL: set --llm-base-url",
        ),
    ],
)
def test_refusals_name_the_setting(
    environ: dict[str, str], overrides: dict[str, str], names: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigurationError) as caught:
        LLMSettings.from_env(environ, names=names, **overrides)
    assert message in str(caught.value)


def test_constructor_checks_too() -> None:
    with pytest.raises(ConfigurationError, match="model is empty"):
        LLMSettings(base_url="http://h", model=" ")
    with pytest.raises(ConfigurationError, match="timeout_seconds must be a number"):
        LLMSettings(base_url="http://h", model="m", timeout_seconds=True)
    with pytest.raises(ConfigurationError, match="base_url must be a plain endpoint URL"):
        LLMSettings(base_url="http://h/v1?key=abc", model="m")


def test_credentials_in_the_url_are_refused_and_not_shown() -> None:
    with pytest.raises(ConfigurationError) as caught:
        LLMSettings(base_url=f"https://user:{SECRET}@llm.example/v1", model="m")
    assert "must not hold credentials" in str(caught.value)
    assert SECRET not in str(caught.value)


def test_a_key_given_as_the_variable_name_is_never_shown() -> None:
    """The likeliest mistake: the key itself where its variable's name belongs."""
    with pytest.raises(ConfigurationError) as caught:
        LLMSettings.from_env(BASE, api_key_env=SECRET, names={"api_key_env": "--llm-api-key-env"})
    assert "--llm-api-key-env must name an environment variable" in str(caught.value)
    assert SECRET not in str(caught.value)
    with pytest.raises(ConfigurationError) as caught:
        LLMSettings(base_url="http://h", model="m", api_key_env=SECRET)
    assert SECRET not in str(caught.value)


def test_from_settings_reads_the_named_variable() -> None:
    settings = LLMSettings(base_url="http://h", model="m", api_key_env="ACME_KEY")

    summarizer = OpenAICompatibleSummarizer.from_settings(settings, environ={"ACME_KEY": SECRET})

    assert summarizer.settings == settings
    assert summarizer.describe()["api_key_set"] is True
    for shown in (repr(summarizer), str(summarizer), repr(summarizer.describe())):
        assert SECRET not in shown


def test_a_named_variable_that_is_unset_is_refused() -> None:
    settings = LLMSettings(base_url="http://h", model="m", api_key_env="ACME_KEY")

    with pytest.raises(ConfigurationError, match=r"\$ACME_KEY is not set or empty"):
        OpenAICompatibleSummarizer.from_settings(settings, environ={})


def test_the_default_variable_unset_means_no_key() -> None:
    """Local servers (llama.cpp, vLLM, Ollama) need no key: no Authorization header."""
    summarizer = OpenAICompatibleSummarizer.from_settings(
        LLMSettings(base_url="http://h", model="m"), environ={}
    )

    assert summarizer.describe()["api_key_set"] is False


def test_from_env_defaults_to_the_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENSQUILLA_SESSION_LLM_BASE_URL", "http://h")
    monkeypatch.setenv("OPENSQUILLA_SESSION_LLM_MODEL", "m")
    monkeypatch.setenv(API_KEY_ENV, SECRET)

    settings = LLMSettings.from_env()
    assert settings is not None
    summarizer = OpenAICompatibleSummarizer.from_settings(settings)

    assert summarizer.describe()["api_key_set"] is True
    assert SECRET not in repr(summarizer)
