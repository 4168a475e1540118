"""The deterministic fallback summary (docs/semantics.md#compaction): a preview of every message.

Tool-call payloads and reasoning are never included, so a large tool payload never reaches
a summary.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

IDENTIFIER_INSTRUCTION = (
    "Preserve opaque identifiers exactly as written (UUIDs, hashes, ids, keys, hostnames, IPs, "
    "ports, URLs, file names); never shorten or reconstruct them."
)
PREVIEW_CHARS = 200


def _attachment_text(content: str) -> str | None:
    """``{"text": ..., "attachments": [...]}`` envelopes reduced to text plus a note."""
    stripped = content.lstrip()
    if not stripped.startswith("{"):
        return None
    try:
        envelope = json.loads(stripped)
    except ValueError:
        return None
    if not isinstance(envelope, dict) or "attachments" not in envelope:
        return None
    text = str(envelope.get("text") or "")
    names = []
    for item in envelope.get("attachments") or []:
        if isinstance(item, dict):
            name = item.get("name") or item.get("filename") or "attachment"
            kind = item.get("type") or item.get("mime_type") or "file"
            names.append(f"{name} ({kind})")
    if names:
        text = f"{text} [user attached: {', '.join(names)}]".strip()
    return text


def preview(content: Any) -> str:
    text = "" if content is None else str(content)
    text = _attachment_text(text) or text
    if len(text) > PREVIEW_CHARS:
        return text[:PREVIEW_CHARS] + "..."
    return text


def fallback_chunk_summary(
    entries: Sequence[Mapping[str, Any]], *, identifier_policy: str = "strict"
) -> str:
    lines = []
    if identifier_policy == "strict":
        lines.append(IDENTIFIER_INSTRUCTION)
    lines.append(f"[Summary of {len(entries)} messages]")
    for entry in entries:
        lines.append(f"  [{entry.get('role')}]: {preview(entry.get('content'))}")
    return "\n".join(lines)


def merge_chunk_summaries(parts: Sequence[str]) -> str:
    if len(parts) == 1:
        return parts[0]
    merged = "[Merged context summary]"
    for number, part in enumerate(parts, start=1):
        merged += f"\n\n--- Part {number} ---\n{part}"
    return merged
