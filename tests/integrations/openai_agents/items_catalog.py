"""Every kind of item the Agents SDK puts in a session (``TResponseInputItem``), in the
shapes the runner saves them, with values a store could bend (key order, -0.0, 1e16, NUL,
unicode), for the exact round-trip tests."""

from __future__ import annotations

from typing import Any

ITEMS: list[dict[str, Any]] = [
    {"role": "user", "content": "plain text from the user"},
    {"content": "key order: content first", "role": "user"},
    {"role": "system", "content": "be brief"},
    {"role": "developer", "content": "developer note"},
    {
        "type": "message",
        "role": "user",
        "content": [
            {"type": "input_text", "text": "look at this"},
            {"type": "input_image", "image_url": "data:image/png;base64,AAAA", "detail": "auto"},
            {"type": "input_file", "file_id": "file_1"},
        ],
    },
    {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [
            {"type": "output_text", "text": "an answer \u00e9\u4e2d\U0001f600", "annotations": []},
            {"type": "refusal", "refusal": "not that"},
        ],
    },
    {
        "type": "reasoning",
        "id": "rs_1",
        "summary": [{"type": "summary_text", "text": "thinking it over"}],
        "encrypted_content": "gAAAA" + "x" * 64,
    },
    {"type": "reasoning", "id": "rs_2", "summary": []},
    {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "call_1",
        "name": "lookup",
        "arguments": '{"q": "weather", "n": 3}',
        "status": "completed",
    },
    {"type": "function_call_output", "call_id": "call_1", "output": "sunny, 21\u00b0C"},
    {
        "type": "function_call_output",
        "call_id": "call_2",
        "output": [
            {"type": "input_text", "text": "part one"},
            {"type": "input_image", "file_id": "f"},
        ],
    },
    {
        "type": "custom_tool_call",
        "id": "ctc_1",
        "call_id": "call_3",
        "name": "grammar",
        "input": "x+1",
    },
    {"type": "custom_tool_call_output", "call_id": "call_3", "output": "ok"},
    {
        "type": "file_search_call",
        "id": "fs_1",
        "queries": ["q"],
        "status": "completed",
        "results": [
            {"file_id": "f1", "score": 0.5, "text": "hit", "attributes": {"b": 1, "a": -0.0}}
        ],
    },
    {
        "type": "web_search_call",
        "id": "ws_1",
        "status": "completed",
        "action": {"type": "search", "query": "q"},
    },
    {
        "type": "computer_call",
        "id": "cu_1",
        "call_id": "call_4",
        "action": {"type": "click", "x": 10, "y": 20, "button": "left"},
        "pending_safety_checks": [],
        "status": "completed",
    },
    {
        "type": "computer_call_output",
        "call_id": "call_4",
        "output": {"type": "computer_screenshot", "image_url": "data:image/png;base64,BBBB"},
    },
    {
        "type": "code_interpreter_call",
        "id": "ci_1",
        "code": "print(1)",
        "container_id": "c",
        "outputs": [{"type": "logs", "logs": "1\n"}],
        "status": "completed",
    },
    {"type": "image_generation_call", "id": "ig_1", "result": "iVBOR", "status": "completed"},
    {
        "type": "local_shell_call",
        "id": "ls_1",
        "call_id": "call_5",
        "action": {"type": "exec", "command": ["ls"], "env": {}},
        "status": "completed",
    },
    {"type": "local_shell_call_output", "id": "call_5", "output": "a.txt\n"},
    {
        "type": "shell_call",
        "call_id": "call_6",
        "action": {"commands": ["pwd"], "timeout_ms": 1000},
        "status": "completed",
    },
    {
        "type": "shell_call_output",
        "call_id": "call_6",
        "output": [{"stdout": "/", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}],
    },
    {
        "type": "apply_patch_call",
        "call_id": "call_7",
        "operation": {"type": "update_file", "path": "a.py", "diff": "@@\n-a\n+b\n"},
        "status": "completed",
    },
    {
        "type": "apply_patch_call_output",
        "call_id": "call_7",
        "status": "completed",
        "output": "done",
    },
    {
        "type": "mcp_list_tools",
        "id": "ml_1",
        "server_label": "s",
        "tools": [{"name": "t", "input_schema": {}}],
    },
    {
        "type": "mcp_approval_request",
        "id": "ma_1",
        "server_label": "s",
        "name": "t",
        "arguments": "{}",
    },
    {"type": "mcp_approval_response", "approval_request_id": "ma_1", "approve": True},
    {
        "type": "mcp_call",
        "id": "mc_1",
        "server_label": "s",
        "name": "t",
        "arguments": "{}",
        "output": "r",
    },
    {"type": "item_reference", "id": "msg_0"},
    {"type": "compaction", "encrypted_content": "opaque"},
    {
        "role": "user",
        "content": "edge values",
        "extra": {
            "z": 1,
            "a": [1e16, -0.0, 1.5, None, True],
            "nul": "a\x00b",
            "deep": {"k": {"k": []}},
        },
    },
]
