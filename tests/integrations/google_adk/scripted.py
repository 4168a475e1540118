"""A scripted ADK model (no network) and the agent the end-to-end tests run.

The model answers from what ADK sends it, so it shows what the agent "remembers":

- ``add A B``: a call of the ``add`` tool; once its response is in the request, the text
  ``sum=<result>``;
- ``recall``: ``last=<the newest sum found in the request> turns=<user texts in it>``;
- ``remember X``: sets ``user:fact`` to ``X`` through the tool ``note``, then says ``ok``;
- anything else: ``echo:<text>``.
"""

from __future__ import annotations

import re
from collections.abc import AsyncGenerator
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.models import BaseLlm, LlmRequest, LlmResponse
from google.adk.tools import ToolContext
from google.genai import types
from pydantic import Field


def add(a: int, b: int) -> dict[str, int]:
    """Add two integers."""
    return {"result": a + b}


def note(fact: str, tool_context: ToolContext) -> dict[str, str]:
    """Remember a fact about the user."""
    tool_context.state["user:fact"] = fact
    tool_context.state["temp:scratch"] = "never stored"
    return {"saved": fact}


def _texts(request: LlmRequest, role: str) -> list[str]:
    return [
        part.text
        for content in request.contents
        if content.role == role
        for part in content.parts or []
        if part.text
    ]


class ScriptedModel(BaseLlm):
    """Answers by the script of the module docstring; records every request's texts."""

    model: str = "scripted"
    requests: list[list[str]] = Field(default_factory=list)

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        self.requests.append(_texts(llm_request, "user") + _texts(llm_request, "model"))
        last = llm_request.contents[-1]
        part = (last.parts or [types.Part()])[-1]
        yield LlmResponse(
            content=types.Content(role="model", parts=self._answer(llm_request, part))
        )

    def _answer(self, request: LlmRequest, part: types.Part) -> list[types.Part]:
        if part.function_response is not None:
            response: dict[str, Any] = part.function_response.response or {}
            if "result" in response:
                return [types.Part(text=f"sum={response['result']}")]
            return [types.Part(text="ok")]
        text = part.text or ""
        if match := re.fullmatch(r"add (-?\d+) (-?\d+)", text):
            args = {"a": int(match[1]), "b": int(match[2])}
            return [types.Part(function_call=types.FunctionCall(name="add", args=args))]
        if match := re.fullmatch(r"remember (.+)", text):
            call = types.FunctionCall(name="note", args={"fact": match[1]})
            return [types.Part(function_call=call)]
        if text == "recall":
            model_texts = _texts(request, "model")
            sums = [t for t in model_texts if t.startswith("sum=")]
            turns = len([t for t in _texts(request, "user") if t != "recall"])
            return [types.Part(text=f"last={sums[-1] if sums else None} turns={turns}")]
        return [types.Part(text=f"echo:{text}")]


def scripted_agent() -> tuple[LlmAgent, ScriptedModel]:
    model = ScriptedModel(requests=[])
    agent = LlmAgent(name="calc", model=model, instruction="Add numbers.", tools=[add, note])
    return agent, model
