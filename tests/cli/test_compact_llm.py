"""``compact`` and ``demo`` with the LLM summariser, against a real HTTP server
(tests/fake_llm.py): configured by options or the environment, the key read from an
environment variable, sent as a Bearer header and shown nowhere; which summariser ran is
in the output; bad settings are one clear error line and touch nothing."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from ..fake_llm import FakeLLM, running
from .support import append_script, cli, dump_tables, opened, run

SECRET = "sk-cli-0123456789-very-secret"
KEY = "agent:main:talk"
MODEL = "acme/compact-1"


@pytest.fixture
def fake() -> Iterator[FakeLLM]:
    yield from running(reply="the model's account, part {n}")


async def _conversation(dsn: str, key: str = KEY) -> None:
    async with opened(dsn) as manager:
        await manager.create(key)
        await append_script(manager, key)


def _everything(result: object) -> str:
    return str(getattr(result, "stdout", "")) + str(getattr(result, "stderr", ""))


def test_compact_with_options(database: str, fake: FakeLLM) -> None:
    run(_conversation(database))

    done = cli(
        database,
        "-vv",
        "compact",
        KEY,
        "--window",
        "2000",
        "--llm-base-url",
        fake.base_url,
        "--llm-model",
        MODEL,
        "--llm-timeout",
        "20",
        "--json",
        env={"OPENSQUILLA_SESSION_LLM_API_KEY": SECRET},
    )

    assert done.exit_code == 0, done.output
    data = json.loads(done.stdout)
    assert data["summarizer"] == {
        "kind": "llm",
        "endpoint": fake.base_url + "/chat/completions",
        "model": MODEL,
        "timeout_seconds": 20.0,
        "api_key_env": "OPENSQUILLA_SESSION_LLM_API_KEY",
        "api_key_set": True,
    }
    assert data["removed_count"] == 8 and data["summary_source"] == "llm"
    assert fake.call_count >= 1
    assert "the model's account, part 1" in data["summary"]
    assert {call.authorization for call in fake.calls} == {f"Bearer {SECRET}"}
    assert {call.model for call in fake.calls} == {MODEL}
    assert SECRET not in _everything(done)
    (row,) = run(dump_tables(database))["session_summaries"]
    assert row["summary_source"] == "llm"


def test_compact_from_the_environment_with_a_named_key_variable(
    database: str, fake: FakeLLM
) -> None:
    run(_conversation(database))
    env = {
        "OPENSQUILLA_SESSION_LLM_BASE_URL": fake.base_url,
        "OPENSQUILLA_SESSION_LLM_MODEL": MODEL,
        "OPENSQUILLA_SESSION_LLM_API_KEY_ENV": "ACME_API_KEY",
        "ACME_API_KEY": SECRET,
    }

    human = cli(database, "compact", KEY, "--window", "2000", env=env)

    assert human.exit_code == 0, human.output
    assert (
        f"summarizer: llm, model {MODEL} at {fake.base_url}/chat/completions "
        "(timeout 90s, API key from $ACME_API_KEY)" in human.stdout
    )
    assert "summary source: llm" in human.stdout
    assert "the model's account, part 1" in human.stdout
    assert {call.authorization for call in fake.calls} == {f"Bearer {SECRET}"}
    assert SECRET not in _everything(human)


def test_without_a_base_url_the_fallback_is_used_and_said(database: str) -> None:
    run(_conversation(database))

    data = json.loads(cli(database, "compact", KEY, "--window", "2000", "--json").stdout)
    human = cli(database, "compact", KEY, "--window", "100000")

    assert data["summarizer"]["kind"] == "fallback"
    assert data["summary_source"] == "fallback"
    assert "summarizer: fallback (deterministic; no LLM base URL" in human.stdout


def test_server_error_falls_back_and_says_so(database: str, fake: FakeLLM) -> None:
    run(_conversation(database))
    fake.default = "error"

    done = cli(
        database,
        "-v",
        "compact",
        KEY,
        "--window",
        "2000",
        "--llm-base-url",
        fake.base_url,
        "--llm-model",
        MODEL,
        "--json",
        env={"OPENSQUILLA_SESSION_LLM_API_KEY": SECRET},
    )

    assert done.exit_code == 0, done.output
    data = json.loads(done.stdout)
    assert data["summarizer"]["kind"] == "llm"
    assert data["summary_source"] == "fallback" and data["removed_count"] == 8
    assert fake.call_count >= 1
    assert "LLM summariser failed (HTTPStatusError, HTTP 500)" in done.stderr
    assert SECRET not in _everything(done)


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (
            ["--llm-base-url", "http://127.0.0.1:9/v1"],
            {},
            "error: an LLM base URL is set (--llm-base-url) but no model: set --llm-model or "
            "$OPENSQUILLA_SESSION_LLM_MODEL",
        ),
        (
            [],
            {"OPENSQUILLA_SESSION_LLM_BASE_URL": "http://127.0.0.1:9/v1"},
            "no model: set --llm-model or $OPENSQUILLA_SESSION_LLM_MODEL",
        ),
        (
            ["--llm-base-url", "localhost:8000", "--llm-model", MODEL],
            {},
            "error: --llm-base-url must be an http:// or https:// URL with a host",
        ),
        (
            ["--llm-base-url", "http://127.0.0.1:9/v1", "--llm-model", MODEL],
            {"OPENSQUILLA_SESSION_LLM_TIMEOUT": "ninety"},
            "error: $OPENSQUILLA_SESSION_LLM_TIMEOUT must be a number of seconds, not 'ninety'",
        ),
        (
            ["--llm-base-url", "http://127.0.0.1:9/v1", "--llm-model", MODEL],
            {},
            "",  # filled below: the key given as the variable's name
        ),
        (
            ["--llm-base-url", "http://127.0.0.1:9/v1", "--llm-model", MODEL],
            {"OPENSQUILLA_SESSION_LLM_API_KEY_ENV": "MISSING_KEY_VAR"},
            "error: the API key variable $MISSING_KEY_VAR is not set or empty",
        ),
        (
            ["--llm-model", MODEL],
            {},
            "error: --llm-model given without a base URL",
        ),
    ],
)
def test_bad_settings_are_one_line_and_touch_nothing(
    database: str, args: list[str], env: dict[str, str], message: str
) -> None:
    run(_conversation(database))
    before = run(dump_tables(database))
    if not message:
        args = [*args, "--llm-api-key-env", SECRET]
        message = "error: --llm-api-key-env must name an environment variable"
    env = {**env, "OPENSQUILLA_SESSION_LLM_API_KEY": SECRET}

    failed = cli(database, "compact", KEY, "--window", "2000", *args, env=env)

    assert failed.exit_code == 1, failed.output
    assert message in " ".join(failed.stderr.split())
    assert len(failed.stderr.strip().splitlines()) == 1
    assert SECRET not in _everything(failed)
    assert run(dump_tables(database)) == before


def test_demo_with_the_llm(database: str, fake: FakeLLM) -> None:
    result = cli(
        database,
        "demo",
        "--llm-base-url",
        fake.base_url,
        "--llm-model",
        MODEL,
        "--json",
        env={"OPENSQUILLA_SESSION_LLM_API_KEY": SECRET},
    )

    assert result.exit_code == 0, result.output
    steps = {step["step"]: step for step in json.loads(result.stdout)["steps"]}
    assert steps["compact"]["summarizer"]["kind"] == "llm"
    assert steps["compact"]["summary_source"] == "llm"
    assert "the model's account, part 1" in steps["compact"]["summary"]
    assert {call.authorization for call in fake.calls} == {f"Bearer {SECRET}"}
    assert SECRET not in _everything(result)
