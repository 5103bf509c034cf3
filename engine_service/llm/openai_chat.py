"""``OpenAIChatModel``: Chat Completions streaming against any OpenAI-compatible endpoint.

The request is one POST through the engine's own small HTTP/1.1 client
(``engine_service.llm.http``), and the SSE body is parsed here, one JSON document per
event (``orjson``: a fifth of ``json.loads``' CPU per chunk): the ``openai`` SDK's
transport (httpx, httpcore, anyio) and its pydantic chunk models cost far more CPU per
chunk than the JSON itself, and its import ~28 MB of memory. Retries are ours, so that a
stream is retried only before its first delta.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import math
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar, cast
from urllib.parse import urlsplit

from engine_service import __version__
from engine_service.core.chat import (
    ChatDelta,
    ChatModel,
    ChatRequest,
    FinishDelta,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    ToolSpec,
    UsageDelta,
)
from engine_service.core.errors import LLMError
from engine_service.core.models import (
    ContentPart,
    DocumentPart,
    ImagePart,
    Message,
    Role,
    TextPart,
    message_text,
)
from engine_service.llm.http import (
    IDLE_TIMEOUT,
    MAX_IDLE,
    BrokenStream,
    ConnectFailed,
    HttpClient,
    HttpError,
    ReadTimedOut,
    Response,
)
from engine_service.llm.refusals import (
    LLM_SETTINGS,
    RETRYABLE,
    SettingNames,
    is_context_words,
    provider_error,
)

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletionMessageParam, ChatCompletionToolUnionParam

__all__ = ["OpenAIChatModel", "to_openai_messages", "to_openai_tools"]

_T = TypeVar("_T")

_DRAIN_SECONDS = 1.0
"""How long to wait for the end of a body after ``[DONE]``."""
MAX_LLM_EVENT_BYTES = 16 * 1024 * 1024
"""Bytes one server-sent event from the LLM may take (its data lines): past it the stream is
``llm_bad_stream``, so an endpoint that never ends a line cannot grow the engine's memory."""

_RETRYABLE = RETRYABLE
_NOT_AUTH = frozenset({"Content-Type", "Accept", "User-Agent"})


class OpenAIChatModel(ChatModel):
    """Streams Chat Completions with tools from an OpenAI-compatible endpoint.

    ``timeout`` bounds connecting and each read, and after the first delta the time
    between two data events (an SSE comment such as ``: keep-alive`` does not count);
    ``first_token_timeout`` bounds the wait for the first delta of an attempt, whatever
    comes before it. Failures before the first delta that may pass
    (unreachable, 429, 5xx, timeout) are retried up to ``max_retries`` times with
    exponential backoff starting at ``retry_backoff`` seconds; once a delta was yielded,
    every failure is final.
    """

    def __init__(
        self,
        *,
        base_url: str,
        api_key: str,
        model: str,
        timeout: float = 60.0,
        first_token_timeout: float = 60.0,
        max_retries: int = 2,
        retry_backoff: float = 0.25,
        headers: Mapping[str, str] | None = None,
        max_idle_connections: int = MAX_IDLE,
        idle_timeout: float = IDLE_TIMEOUT,
        settings: SettingNames = LLM_SETTINGS,
    ) -> None:
        """``headers`` go with every request (an agent's own, ``[[agents]] headers``);
        ``max_idle_connections`` and ``idle_timeout`` bound the kept-alive connections;
        ``settings``: the settings a refusal names (an agent's own, or ``[llm]``'s)."""
        self.name = f"openai:{model}"
        self.model = model
        self.settings = settings
        self.base_url = base_url.rstrip("/")
        self.endpoint_host = urlsplit(self.base_url).hostname or ""
        self.timeout = timeout
        self.first_token_timeout = first_token_timeout
        self.max_retries = max_retries
        self.retry_backoff = retry_backoff
        self._endpoint = f"{self.base_url}/chat/completions"
        # Local servers (Ollama, vLLM, llama.cpp) take any key; send one all the same.
        self._headers = {
            "Authorization": f"Bearer {api_key or 'not-needed'}",
            "Content-Type": "application/json",
            "Accept": "text/event-stream",
            "User-Agent": f"agentik/{__version__}",
            **(headers or {}),
        }
        self.auth_headers = {
            key: value for key, value in self._headers.items() if key not in _NOT_AUTH
        }
        """What identifies this model's caller to the endpoint: the key, the agent's
        headers (the LLM check, ``llm.probe``, sends the same)."""
        self._http = HttpClient(
            connect_timeout=timeout,
            read_timeout=timeout,
            max_idle=max_idle_connections,
            idle_timeout=idle_timeout,
        )

    async def aclose(self) -> None:
        """Close the pooled HTTP connections."""
        await self._http.aclose()

    async def stream(self, request: ChatRequest) -> AsyncIterator[ChatDelta]:
        """Stream one completion, retrying only failures that happen before any delta."""
        attempt = 0
        while True:
            started = False
            try:
                # aclosing: a consumer that stops early must close the HTTP response now.
                async with contextlib.aclosing(self._attempt(request)) as deltas:
                    async for delta in deltas:
                        started = True
                        yield delta
                return
            except LLMError as exc:
                if started or not exc.retryable or attempt >= self.max_retries:
                    raise
            await asyncio.sleep(self.retry_backoff * 2**attempt)
            attempt += 1

    async def _attempt(self, request: ChatRequest) -> AsyncGenerator[ChatDelta, None]:
        """One HTTP request: send it, then turn its SSE events into deltas."""
        deadline: float | None = asyncio.get_running_loop().time() + self.first_token_timeout
        payload: dict[str, object] = {
            "model": self.model,
            "messages": to_openai_messages(request.messages),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if request.tools:
            payload["tools"] = to_openai_tools(request.tools)
        body = _dumps(payload)
        response: Response | None = None
        try:
            response = await self._bounded(
                self._http.post(self._endpoint, self._headers, body), deadline
            )
            if response.status >= 400:
                raise await self._status_error(response)
            content_type = response.headers.get("content-type", "")
            if not content_type.startswith("text/event-stream"):
                raise _error(
                    "llm_bad_stream",
                    "the LLM endpoint answered with something other than an event stream",
                    f"LLM endpoint {self._endpoint} answered"
                    f" {content_type or 'no content type'} instead of an event stream",
                )
            chunks = response.chunks()
            decoder = _SSEDecoder(MAX_LLM_EVENT_BYTES)
            parser = _ChunkParser(self._endpoint)
            ended = False
            while not (parser.done or ended):
                try:
                    if deadline is None:
                        chunk = await anext(chunks)
                    else:
                        chunk = await self._bounded(anext(chunks), deadline)
                    payloads = decoder.feed(chunk)
                    if decoder.saw_data:
                        response.progressed()
                except StopAsyncIteration:
                    payloads, ended = decoder.end(), True
                if deadline is not None:  # nothing said yet
                    first, payloads = parser.feed_first(payloads)
                    if first:
                        # The first delta is in: only read timeouts from now, and only data
                        # ends a silence (a comment no longer does: before the first delta
                        # the first-token deadline bounds the wait, comments or not).
                        deadline = None
                        response.count_progress_only()
                        for delta in first:
                            yield delta
                if parser.error is None and (deltas := parser.feed(payloads)):
                    deadline = None
                    for delta in deltas:
                        yield delta
                if parser.error is not None:
                    try:
                        raise parser.error  # raised, not kept: no cycle with this frame
                    finally:
                        parser.error = None
                if decoder.over:
                    raise _error(
                        "llm_bad_stream",
                        "the LLM endpoint sent an event larger than the limit",
                        f"LLM endpoint {self._endpoint} sent an event over"
                        f" {MAX_LLM_EVENT_BYTES} bytes",
                    )
            finish = parser.finish()
            if parser.done:
                await _drain(chunks)
            yield finish
        except ConnectFailed as exc:
            raise _error(
                "llm_unavailable",
                "cannot reach the LLM endpoint",
                f"cannot reach the LLM endpoint {self._endpoint}: {exc}",
            ) from exc
        except ReadTimedOut as exc:
            raise _error(
                "llm_timeout",
                f"the stream from the LLM stalled: no data for {self.timeout:g}s ([llm] timeout)",
                f"the stream from {self._endpoint} stalled: {exc}",
            ) from exc
        except (BrokenStream, HttpError) as exc:
            raise _error(
                "llm_bad_stream",
                "the stream from the LLM broke off",
                f"the stream from {self._endpoint} broke: {exc}",
            ) from exc
        finally:
            if response is not None:
                await response.aclose()

    async def _bounded(self, awaitable: Awaitable[_T], deadline: float | None) -> _T:
        """Await, bounded by the first-token deadline while there is one."""
        if deadline is None:
            return await awaitable
        try:
            async with asyncio.timeout_at(deadline):
                return await awaitable
        except TimeoutError:
            raise _error(
                "llm_timeout",
                f"the LLM endpoint sent nothing for {self.first_token_timeout:g}s",
                f"LLM endpoint {self._endpoint} sent nothing for {self.first_token_timeout:g}s",
            ) from None

    async def _status_error(self, response: Response) -> LLMError:
        """The error an HTTP error answer means (``llm.refusals``): the provider's code
        and a plain cause for the client, everything for the log."""
        status = response.status
        code, text, param = "", "", ""
        try:
            raw = await response.read_all(64 * 1024)
            code, text, param = _error_fields(json.loads(raw))
        except (HttpError, ValueError):
            pass
        else:
            text = text or raw[:300].decode("utf-8", "replace")
        logged = f"LLM endpoint {self._endpoint} answered HTTP {status}: {code} {text}".rstrip()
        return provider_error(status, code, text, logged, param, self.settings)


def _error(code: str, message: str, detail: str = "") -> LLMError:
    """``message`` for the client (no URL, host or class name); ``detail`` for the log."""
    return LLMError(code, message, retryable=code in _RETRYABLE, detail=detail)


def _error_fields(body: object) -> tuple[str, str, str]:
    """The ``error.code`` (or ``type``), ``error.message`` and ``error.param`` of an
    OpenAI-style error body."""
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict):
            message, param = error.get("message"), error.get("param")
            code = error.get("code") or error.get("type")
            return (
                str(code) if isinstance(code, str | int) else "",
                message if isinstance(message, str) else "",
                param if isinstance(param, str) else "",
            )
        if isinstance(error, str):  # llama.cpp and Ollama: {"error": "..."}
            return "", error, ""
    return "", "", ""


async def _drain(body: AsyncIterator[bytes]) -> None:
    """Read what follows ``[DONE]`` (the body's end) so the connection can be reused."""
    with contextlib.suppress(TimeoutError, StopAsyncIteration, HttpError):
        async with asyncio.timeout(_DRAIN_SECONDS):
            while True:
                await anext(body)


class _SSEDecoder:
    """Splits a byte stream into the ``data`` payloads of its server-sent events.

    An event may take at most ``limit`` bytes: past it, ``over`` is set and nothing more is
    decoded (the events before it are returned first). ``saw_data`` says whether the last
    chunk fed carried any of a data line (comments and blank lines do not)."""

    def __init__(self, limit: int) -> None:
        self._buffer = b""
        self._data: list[bytes] = []
        self._held = 0
        """Bytes of the event being read: its data lines so far and the unfinished line."""
        self._limit = limit
        self.over = False
        self.saw_data = False

    def feed(self, chunk: bytes) -> list[bytes]:
        """The payloads of the events this chunk completes."""
        if self.over:
            return []
        buffer = self._buffer + chunk
        if b"\n" not in chunk:
            self._buffer = buffer
            self.over = self._held + len(buffer) > self._limit
            self.saw_data = not buffer.startswith(b":")  # a line growing, not a comment
            return []
        self.saw_data = False
        *lines, self._buffer = buffer.split(b"\n")
        payloads: list[bytes] = []
        for line in lines:
            self._line(line, payloads)
            if self._held > self._limit:
                self.over = True
                return payloads
        self.over = self._held + len(self._buffer) > self._limit
        if self._buffer and not self._buffer.startswith(b":"):
            self.saw_data = True
        return payloads

    def end(self) -> list[bytes]:
        """The payload of an event the stream ended in without its blank line."""
        payloads: list[bytes] = []
        self._line(self._buffer, payloads)
        self._buffer = b""
        self._line(b"", payloads)
        return payloads

    def _line(self, line: bytes, payloads: list[bytes]) -> None:
        if line.endswith(b"\r"):
            line = line[:-1]
        if not line:
            if self._data:
                data = self._data
                payloads.append(data[0] if len(data) == 1 else b"\n".join(data))
                self._data = []
            self._held = 0
        elif line.startswith(b"data:"):
            self.saw_data = True
            value = line[5:]
            self._data.append(value[1:] if value.startswith(b" ") else value)
            self._held += len(line)
        # Comments (": keep-alive") and event/id/retry fields carry nothing for us.


_fast_loads: Callable[[bytes], Any] = json.loads
"""``orjson.loads`` once a request was made (imported then: the idle engine does not hold
its 2.3 MB)."""
_fast_refusal: type[ValueError] = json.JSONDecodeError
_fast_dumps: Callable[[Any], bytes] | None = None


def _load_orjson() -> None:
    global _fast_loads, _fast_refusal, _fast_dumps
    import orjson

    _fast_loads, _fast_refusal, _fast_dumps = orjson.loads, orjson.JSONDecodeError, orjson.dumps


def _dumps(payload: dict[str, object]) -> bytes:
    """The request's body: compact JSON in UTF-8, by ``orjson`` (0.5 µs against ``json``'s
    8.7 µs for a short request with two tools; measured in docs/performance.md). What it
    refuses (an integer past 64 bits in a tool's schema) ``json`` writes; a string ``json``
    cannot encode either (a lone surrogate) raises as it did before."""
    if _fast_dumps is None:
        _load_orjson()
    assert _fast_dumps is not None
    try:
        return _fast_dumps(payload)
    except TypeError:  # orjson.JSONEncodeError is a TypeError
        return json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode()


def _loads(payload: bytes) -> Any:
    """``json.loads(payload)``, fast: ``orjson`` reads what a stream holds; what it refuses
    and ``json`` may still read (NaN, lone surrogates, UTF-16) goes to ``json``, so what is
    refused is what ``json.loads`` refuses. (An integer past 64 bits, which no field we
    read can mean, comes back a float: ``_count`` clamps counts either way.)"""
    try:
        return _fast_loads(payload)
    except _fast_refusal:
        return json.loads(payload)


class _ChunkParser:
    """Turns ``chat.completion.chunk`` payloads into deltas and checks the stream ends well."""

    def __init__(self, endpoint: str) -> None:
        if _fast_loads is json.loads:
            _load_orjson()
        self._endpoint = endpoint
        self._finish_reason = ""
        self.done = False
        """True once ``[DONE]`` was read."""
        self.error: LLMError | None = None
        """What ended the stream early, raised after the deltas that came before it."""

    def feed(self, payloads: list[bytes]) -> list[ChatDelta]:
        """The deltas of these events; whatever follows ``[DONE]`` is ignored. An event
        that is an error (or nonsense) ends the feed: the deltas before it are returned,
        and the error is kept in ``error`` to be raised once they are out."""
        deltas: list[ChatDelta] = []
        for payload in payloads:
            if self.done:
                break
            if payload == b"[DONE]":
                self.done = True
                continue
            try:
                self._chunk(payload, deltas)
            except LLMError as exc:
                self.error = exc
                break
        return deltas

    def feed_first(self, payloads: list[bytes]) -> tuple[list[ChatDelta], list[bytes]]:
        """As :meth:`feed`, one event at a time up to the first that gives a delta: its
        deltas, and the events after it, not parsed yet. The first token of an answer then
        leaves before the rest of a large first read is parsed (and merged)."""
        for index, payload in enumerate(payloads):
            deltas = self.feed([payload])
            if deltas or self.error is not None or self.done:
                return deltas, payloads[index + 1 :]
        return [], []

    def _chunk(self, payload: bytes, deltas: list[ChatDelta]) -> None:
        try:
            chunk = _loads(payload)
        except ValueError:
            raise _error(
                "llm_bad_stream",
                "the LLM endpoint sent invalid JSON in its stream",
                f"LLM endpoint {self._endpoint} sent invalid JSON in its stream: {payload[:200]!r}",
            ) from None
        if not isinstance(chunk, dict):
            raise self._nonsense(payload)
        if "error" in chunk:
            code, text, _ = _error_fields(chunk)
            detail = text or str(chunk["error"])
            if code == "context_length_exceeded" or is_context_words(detail):
                logged = f"LLM endpoint {self._endpoint} reported mid-stream: {detail}"
                raise provider_error(400, code, detail, logged)
            raise _error(
                "llm_server_error",
                "the LLM endpoint reported an error mid-stream",
                f"LLM endpoint {self._endpoint} reported an error mid-stream: {detail}",
            )
        choices = chunk.get("choices")
        if choices:
            try:
                self._choice(choices[0], deltas)
            except (AttributeError, KeyError, TypeError, IndexError):
                raise self._nonsense(payload) from None
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            details = usage.get("prompt_tokens_details")
            cached = details.get("cached_tokens") if isinstance(details, dict) else 0
            deltas.append(
                UsageDelta(
                    _count(usage.get("prompt_tokens")),
                    _count(usage.get("completion_tokens")),
                    _count(cached),
                )
            )

    def _choice(self, choice: dict[str, Any], deltas: list[ChatDelta]) -> None:
        delta = choice.get("delta") or {}
        # What arrived together is one delta: a fragment that continues the one before it
        # (more text, more reasoning, more arguments of the same call) is added to it. When
        # the LLM sends faster than its tokens are handled, a run then makes a few events
        # instead of one per token; a token that comes alone still leaves alone, at once.
        last = deltas[-1] if deltas else None
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        if reasoning:
            if type(last) is ReasoningDelta:
                last.text += reasoning
            else:
                deltas.append(last := ReasoningDelta(reasoning))
        content = delta.get("content")
        if content:
            if type(last) is TextDelta:
                last.text += content
            else:
                deltas.append(last := TextDelta(content))
        for position, call in enumerate(delta.get("tool_calls") or ()):
            function = call.get("function") or {}
            index = call.get("index")
            fragment = ToolCallDelta(
                index=index if isinstance(index, int) else position,
                id=call.get("id") or "",
                name=function.get("name") or "",
                arguments=function.get("arguments") or "",
            )
            if fragment.id or fragment.name:
                deltas.append(last := fragment)
            elif fragment.arguments:
                if type(last) is ToolCallDelta and last.index == fragment.index:
                    last.arguments += fragment.arguments
                else:
                    deltas.append(last := fragment)
        if choice.get("finish_reason"):
            self._finish_reason = choice["finish_reason"]

    def finish(self) -> FinishDelta:
        """The closing ``FinishDelta``, or an error if the stream stopped short."""
        if not (self.done or self._finish_reason):
            raise _error(
                "llm_bad_stream",
                "the stream from the LLM ended before its finish_reason and [DONE]",
                f"the stream from {self._endpoint} ended before its finish_reason and [DONE]",
            )
        return FinishDelta(self._finish_reason or "stop")

    def _nonsense(self, payload: bytes) -> LLMError:
        return _error(
            "llm_bad_stream",
            "the LLM endpoint sent a chunk that is not a chat completion chunk",
            f"LLM endpoint {self._endpoint} sent a chunk that is not a chat completion chunk: "
            f"{payload[:200]!r}",
        )


def to_openai_tools(tools: list[ToolSpec]) -> list[ChatCompletionToolUnionParam]:
    """Our tool specs as Chat Completions ``function`` tools."""
    empty: dict[str, object] = {"type": "object", "properties": {}}
    return [
        {
            "type": "function",
            "function": {
                "name": tool.name,
                "description": tool.description,
                "parameters": tool.parameters or empty,
            },
        }
        for tool in tools
    ]


def to_openai_messages(messages: list[Message]) -> list[ChatCompletionMessageParam]:
    """Our messages as Chat Completions messages (images as ``image_url`` parts)."""
    return [cast("ChatCompletionMessageParam", _to_openai_message(m)) for m in messages]


def _to_openai_message(message: Message) -> dict[str, Any]:
    if message.role is Role.TOOL:
        return {
            "role": "tool",
            "tool_call_id": message.tool_call_id,
            "content": message_text(message),
        }
    # "developer" is sent as "system": many OpenAI-compatible servers (Ollama, vLLM,
    # llama.cpp) reject the newer role, and OpenAI treats the two alike.
    role = "system" if message.role is Role.DEVELOPER else message.role.value
    out: dict[str, Any] = {"role": role}
    if message.role is Role.ASSISTANT:
        text = message_text(message)
        out["content"] = text or None
        if message.tool_calls:
            out["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments},
                }
                for c in message.tool_calls
            ]
        elif not text:
            out["content"] = ""
    elif message.role is Role.USER and any(
        isinstance(p, ImagePart | DocumentPart) for p in message.content
    ):
        out["content"] = [_content_part(p) for p in message.content]
    else:
        out["content"] = message_text(message)
    if message.name and message.role is not Role.ASSISTANT:
        out["name"] = message.name
    return out


def _content_part(part: ContentPart) -> dict[str, Any]:
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text}
    if isinstance(part, DocumentPart):  # Chat Completions' file part
        if part.file_id:
            return {"type": "file", "file": {"file_id": part.file_id}}
        encoded = base64.b64encode(part.data).decode("ascii")
        return {
            "type": "file",
            "file": {
                "filename": part.filename or "document.pdf",
                "file_data": f"data:{part.mime_type};base64,{encoded}",
            },
        }
    url = part.url
    if not url:
        encoded = base64.b64encode(part.data).decode("ascii")
        url = f"data:{part.mime_type or 'application/octet-stream'};base64,{encoded}"
    return {"type": "image_url", "image_url": {"url": url}}


def _count(value: object) -> int:
    """A token count the LLM reported; 0 for anything that is not a count."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    if isinstance(value, float) and not math.isfinite(value):
        return 0
    return max(0, min(int(value), 1 << 40))
