"""A scripted Agents SDK model (no network): it answers from the input it is given.

- ``remember <word>``: answers ``noted <word>``;
- ``add <a> <b>``: calls the ``add`` tool, then answers ``sum <output>`` from its result;
- ``recall``: answers ``recall: `` and every word it finds remembered in its input (the
  user messages ``remember <word>``, and a compaction summary's text), in order;
- ``count``: answers how many input items it was given.

Every call is recorded (``inputs``) so a test sees exactly what the runner sent.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from typing import Any

from agents import Agent, function_tool
from agents.items import ModelResponse, TResponseInputItem
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage
from openai.types.responses.response_output_text import ResponseOutputText

WORD = re.compile(r"remember (\w+)")


def _text(item: Any) -> str:
    content = item.get("content") if isinstance(item, dict) else None
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


class ScriptedModel(Model):
    def __init__(self) -> None:
        self.inputs: list[list[Any]] = []
        self.calls = 0

    def _message(self, text: str) -> ResponseOutputMessage:
        self.calls += 1
        return ResponseOutputMessage(
            id=f"msg_{self.calls}",
            content=[ResponseOutputText(annotations=[], text=text, type="output_text")],
            role="assistant",
            status="completed",
            type="message",
        )

    async def get_response(
        self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
    ) -> ModelResponse:
        items: list[Any] = (
            [{"role": "user", "content": input}] if isinstance(input, str) else list(input)
        )
        self.inputs.append(items)
        last = items[-1]
        output: Any
        if isinstance(last, dict) and last.get("type") == "function_call_output":
            output = self._message(f"sum {last['output']}")
        else:
            asked = _text(last)
            if asked.startswith("add "):
                self.calls += 1
                a, b = asked.split()[1:3]
                output = ResponseFunctionToolCall(
                    arguments=json.dumps({"a": int(a), "b": int(b)}),
                    call_id=f"call_{self.calls}",
                    name="add",
                    type="function_call",
                    id=f"fc_{self.calls}",
                    status="completed",
                )
            elif asked.startswith("remember "):
                output = self._message(f"noted {asked.split()[1]}")
            elif asked == "recall":
                words = [w for item in items[:-1] for w in WORD.findall(_text(item))]
                output = self._message("recall: " + " ".join(dict.fromkeys(words)))
            elif asked == "count":
                output = self._message(f"count {len(items) - 1}")
            else:
                output = self._message("?")
        return ModelResponse(output=[output], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError("the scripted model does not stream")


@function_tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def scripted_agent(model: ScriptedModel) -> Agent[Any]:
    return Agent(name="scripted", instructions="Answer from the history.", model=model, tools=[add])


def user_texts(items: list[TResponseInputItem]) -> list[str]:
    return [_text(i) for i in items if isinstance(i, dict) and i.get("role") == "user"]


PADDING = " (a detail to keep in mind for later, told at some length so it weighs a little)" * 3


class RememberingSummarizer:
    """A deterministic summariser: the summary of a chunk is its ``remember <word>``
    phrases, so an agent reading the summary still recalls every word."""

    source = "llm"

    def __init__(self) -> None:
        self.chunks: list[list[Any]] = []

    async def summarize(self, chunk: Any, *, config: Any, custom_instructions: Any) -> str:
        self.chunks.append(list(chunk))
        words = [w for entry in chunk for w in WORD.findall(str(entry.get("content") or ""))]
        return "Earlier: " + "; ".join(f"remember {w}" for w in words)
