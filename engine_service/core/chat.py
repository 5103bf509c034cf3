"""The ``ChatModel`` interface: one streamed chat completion with tools.

A model streams small deltas; the run loop turns them into AG-UI events, assembles
tool calls by index and decides what to store.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TypeAlias

from engine_service.core.errors import LLMError
from engine_service.core.models import JSON, Message

__all__ = [
    "ChatDelta",
    "ChatModel",
    "ChatRequest",
    "FinishDelta",
    "ReasoningDelta",
    "TextDelta",
    "ToolCallDelta",
    "ToolSpec",
    "UsageDelta",
    "read_until",
]


@dataclass(slots=True)
class ToolSpec:
    """A tool as the LLM sees it."""

    name: str
    description: str
    parameters: dict[str, JSON]


@dataclass(slots=True)
class ChatRequest:
    """The conversation so far (system prompt first) and the tools on offer."""

    messages: list[Message]
    tools: list[ToolSpec] = field(default_factory=list)


@dataclass(slots=True)
class TextDelta:
    text: str


@dataclass(slots=True)
class ReasoningDelta:
    text: str


@dataclass(slots=True)
class ToolCallDelta:
    """A fragment of tool call ``index``: the first carries id and name."""

    index: int
    id: str = ""
    name: str = ""
    arguments: str = ""


@dataclass(slots=True)
class UsageDelta:
    input_tokens: int
    output_tokens: int
    cached_tokens: int = 0
    """Of ``input_tokens``, those served from the provider's prompt cache."""


@dataclass(slots=True)
class FinishDelta:
    reason: str


ChatDelta: TypeAlias = TextDelta | ReasoningDelta | ToolCallDelta | UsageDelta | FinishDelta


class ChatModel(abc.ABC):
    """An LLM behind a chat-completions style API."""

    name: str
    """What the engine reports at start-up, e.g. ``openai:gpt-4o-mini`` or ``offline``."""
    endpoint_host: str = ""
    """The host the model is reached at (traces name it); empty for an in-process model."""

    @abc.abstractmethod
    def stream(self, request: ChatRequest) -> AsyncIterator[ChatDelta]:
        """Stream one completion.

        Raises ``LLMError`` (with a contract code) for every failure; never yields a
        partial result and then retries. Cancelling the consuming task must stop the
        underlying request at once.
        """

    async def aclose(self) -> None:  # noqa: B027 - optional hook
        """Release connections."""


@contextlib.asynccontextmanager
async def read_until(
    stream: AsyncIterator[ChatDelta], deadline: float, timed_out: str
) -> AsyncIterator[AsyncIterator[ChatDelta]]:
    """``stream``, to be read until the loop's clock reaches ``deadline``: past it the read
    ends with ``llm_timeout`` and the message ``timed_out``. The stream is closed at the end
    either way: a bound that ends the read early leaves it open, and its HTTP response is
    then closed at once, not when the collector finds it."""
    timer = asyncio.timeout_at(deadline)
    try:
        async with timer:
            yield stream
    except TimeoutError:
        if not timer.expired():
            raise
        raise LLMError("llm_timeout", timed_out) from None
    finally:
        aclose = getattr(stream, "aclose", None)
        if aclose is not None:
            await aclose()
