"""Sizes both processes hold to: what one gRPC message may carry, and the range of
``max_event_bytes`` (the engine's setting, checked where the settings are read)."""

from __future__ import annotations

from typing import Final

__all__ = [
    "COMPACTION_MODES",
    "GRPC_MESSAGE_LIMIT",
    "INPUT_MODALITIES",
    "MAX_EVENT_BYTES",
    "MIN_CONTEXT_TOKENS",
    "MIN_EVENT_BYTES",
    "check_modalities",
]

GRPC_MESSAGE_LIMIT: Final = 4 * 1024 * 1024
"""What gRPC clients accept by default in one message: what the engine never sends past."""
MIN_EVENT_BYTES: Final = 16 * 1024
"""The smallest ``max_event_bytes``: a note and a useful piece must fit."""
MAX_EVENT_BYTES: Final = 3 * 1024 * 1024
"""The largest ``max_event_bytes``: an event, its envelope and a page's overhead stay
under ``GRPC_MESSAGE_LIMIT``."""
COMPACTION_MODES: Final = ("summarize", "trim", "off")
"""``[llm] compaction``: how a conversation over the context budget is made to fit."""
MIN_CONTEXT_TOKENS: Final = 512
"""The smallest window ``[llm] context_tokens`` may name: room for a system prompt, one
exchange and a summary."""
INPUT_MODALITIES: Final = ("text", "image", "document")
"""``[llm] input_modalities``: what a model may be sent; text always, images and documents
(PDFs) where it takes them (the default: text and images)."""


def check_modalities(items: object) -> tuple[str, ...]:
    """``items`` as input modalities, or ValueError saying why not: known names, text
    among them."""
    if not isinstance(items, list | tuple) or not all(isinstance(i, str) for i in items):
        raise ValueError('must be an array of modalities, e.g. ["text", "image"]')
    names = tuple(dict.fromkeys(i.strip().lower() for i in items))
    unknown = [n for n in names if n not in INPUT_MODALITIES]
    if unknown:
        raise ValueError(f"{unknown[0]!r} is not a modality; known: {', '.join(INPUT_MODALITIES)}")
    if "text" not in names:
        raise ValueError('must include "text"')
    return names
