"""What MCP tools look like to the LLM: their names and their results.

Names: a server's tool ``<tool>`` is offered as ``<server>__<tool>`` (two underscores),
so tools of different servers, and native tools, cannot collide. Characters outside
the OpenAI tool-name set ``[a-zA-Z0-9_-]`` become ``_``; a name longer than 64
characters is cut and ends in ``_`` plus 8 hex digits of a hash of the full name.

Results (``CallToolResult`` → ``ToolResult``):

- text blocks → the text, joined by blank lines;
- images → an ``ImagePart`` each (for clients to show) plus a text note for the LLM;
- embedded text resources → their text; other blobs and audio → a text note;
- resource links → a note with the URI;
- structured content → its JSON text, when there is no text block (a server that
  returns structured content normally repeats it as text);
- ``is_error`` → an error result with the server's text.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re

from mcp_types import (
    AudioContent,
    BlobResourceContents,
    CallToolResult,
    ContentBlock,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
    TextResourceContents,
)

from engine_service.core.models import ContentPart, ImagePart
from engine_service.core.tool import ToolResult

__all__ = ["MAX_TOOL_NAME", "SEPARATOR", "disambiguate", "tool_name", "tool_result"]

SEPARATOR = "__"
MAX_TOOL_NAME = 64
"""The longest tool name OpenAI-compatible APIs accept."""
_OUTSIDE_CHARSET = re.compile(r"[^A-Za-z0-9_-]")
_HASH_DIGITS = 8


def tool_name(server: str, tool: str) -> str:
    """The registry name of ``server``'s tool ``tool``: ``<server>__<tool>``, made safe."""
    full = f"{server}{SEPARATOR}{tool}"
    name = _OUTSIDE_CHARSET.sub("_", full)
    return disambiguate(name, full) if len(name) > MAX_TOOL_NAME else name


def disambiguate(name: str, original: str) -> str:
    """``name`` cut to end in ``_`` and a hash of ``original``, within 64 characters.

    Also used when two of a server's tool names become the same once made safe.
    """
    digest = hashlib.sha256(original.encode()).hexdigest()[:_HASH_DIGITS]
    return f"{name[: MAX_TOOL_NAME - _HASH_DIGITS - 1]}_{digest}"


def tool_result(result: CallToolResult) -> ToolResult:
    """The LLM's view of an MCP tool result."""
    texts: list[str] = []
    parts: list[ContentPart] = []
    for block in result.content:
        _convert(block, texts, parts)
    has_text = any(isinstance(block, TextContent) for block in result.content)
    if result.structured_content is not None and not has_text:
        texts.insert(0, json.dumps(result.structured_content, ensure_ascii=False))
    content = "\n\n".join(text for text in texts if text)
    if result.is_error:
        return ToolResult(f"error: {content or 'the tool reported an error'}", True, parts)
    return ToolResult(content or "(the tool returned nothing)", False, parts)


def _convert(block: ContentBlock, texts: list[str], parts: list[ContentPart]) -> None:
    if isinstance(block, TextContent):
        texts.append(block.text)
    elif isinstance(block, ImageContent):
        texts.append(_image(block.data, block.mime_type, parts, "image"))
    elif isinstance(block, AudioContent):
        texts.append(f"[audio ({block.mime_type}) omitted]")
    elif isinstance(block, ResourceLink):
        label = f" ({block.name})" if block.name and block.name != block.uri else ""
        texts.append(f"[resource link: {block.uri}{label}]")
    elif isinstance(block, EmbeddedResource):
        resource = block.resource
        if isinstance(resource, TextResourceContents):
            texts.append(resource.text)
        elif isinstance(resource, BlobResourceContents):
            mime = resource.mime_type or "application/octet-stream"
            if mime.startswith("image/"):
                texts.append(_image(resource.blob, mime, parts, f"image {resource.uri}"))
            else:
                texts.append(f"[resource {resource.uri} ({mime}) omitted]")


def _image(data: str, mime_type: str, parts: list[ContentPart], label: str) -> str:
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return f"[{label} ({mime_type}) could not be decoded]"
    parts.append(ImagePart(data=raw, mime_type=mime_type))
    return f"[{label} ({mime_type}, {len(raw)} bytes) attached for the user]"
