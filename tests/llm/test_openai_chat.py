"""OpenAIChatModel against a real HTTP fake of the Chat Completions API over loopback."""

from __future__ import annotations

import asyncio
import json
import re
import socket
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from typing import Any, cast

import pytest

from engine_service.core.chat import (
    ChatDelta,
    ChatRequest,
    FinishDelta,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    ToolSpec,
    UsageDelta,
)
from engine_service.core.errors import LLMError
from engine_service.core.models import ImagePart, Message, Role, TextPart, ToolCall
from engine_service.llm.openai_chat import OpenAIChatModel, to_openai_tools
from tests.fakes.fake_openai import FakeOpenAI, FakeReply, FakeToolCall

WAIT = 5.0
"""Bound on every wait for something the fake or the model should do promptly."""


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


def make_model(fake: FakeOpenAI, api_key: str = "sk-test", **overrides: float) -> OpenAIChatModel:
    options: dict[str, float] = {
        "timeout": 5.0,
        "first_token_timeout": 5.0,
        "max_retries": 0,
        "retry_backoff": 0.01,
    }
    options.update(overrides)
    return OpenAIChatModel(
        base_url=fake.base_url,
        api_key=api_key,
        model="gpt-test",
        timeout=options["timeout"],
        first_token_timeout=options["first_token_timeout"],
        max_retries=int(options["max_retries"]),
        retry_backoff=options["retry_backoff"],
    )


@pytest.fixture
async def model(fake: FakeOpenAI) -> AsyncIterator[OpenAIChatModel]:
    chat = make_model(fake)
    yield chat
    await chat.aclose()


def ask(text: str, tools: list[ToolSpec] | None = None) -> ChatRequest:
    return ChatRequest([Message("m1", Role.USER, [TextPart(text)])], tools or [])


async def run(
    chat: OpenAIChatModel, request: ChatRequest
) -> tuple[list[ChatDelta], LLMError | None]:
    """Every delta the model yields, and the LLMError it ended with (if any)."""
    deltas: list[ChatDelta] = []
    try:
        async with asyncio.timeout(WAIT):
            async for delta in chat.stream(request):
                deltas.append(delta)
    except LLMError as exc:
        return deltas, exc
    return deltas, None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# --- streaming -------------------------------------------------------------------------


async def test_text_streams_as_text_deltas_then_usage_then_finish(
    fake: FakeOpenAI, model: OpenAIChatModel
) -> None:
    fake.enqueue(FakeReply(text=["Hel", "lo", " world"], usage=(7, 3)))

    deltas, error = await run(model, ask("hi"))

    assert error is None
    # Tokens read together come as one delta (tests/llm/test_http.py): only the text and
    # the order of kinds are fixed here.
    texts = [d for d in deltas if isinstance(d, TextDelta)]
    assert "".join(d.text for d in texts) == "Hello world"
    assert deltas[len(texts) :] == [
        UsageDelta(input_tokens=7, output_tokens=3),
        FinishDelta("stop"),
    ]


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
async def test_reasoning_deltas_come_from_either_reasoning_field(
    fake: FakeOpenAI, model: OpenAIChatModel, field: str
) -> None:
    fake.enqueue(FakeReply(reasoning=["Let me ", "see."], reasoning_field=field, text="Four."))

    deltas, error = await run(model, ask("2+2?"))

    assert error is None
    kinds = [type(d) for d in deltas]
    reasoning = [d.text for d in deltas if isinstance(d, ReasoningDelta)]
    assert "".join(reasoning) == "Let me see."
    assert kinds.index(TextDelta) == len(reasoning)  # all the reasoning, then the text
    assert "".join(d.text for d in deltas if isinstance(d, TextDelta)) == "Four."


async def test_parallel_tool_calls_arrive_by_index_and_assemble_into_whole_calls(
    fake: FakeOpenAI, model: OpenAIChatModel
) -> None:
    fake.enqueue(
        FakeReply(
            tool_calls=[
                FakeToolCall(
                    "current_time", {"timezone": "Europe/Paris"}, id="call_a", fragments=4
                ),
                FakeToolCall("calculate", {"expression": "2*(3+4)"}, id="call_b", fragments=3),
            ],
            interleave_tool_calls=True,
        )
    )

    deltas, error = await run(model, ask("time and math"))

    assert error is None
    fragments = [d for d in deltas if isinstance(d, ToolCallDelta)]
    assert [f.index for f in fragments[:4]] == [0, 1, 0, 1]  # really interleaved
    calls: dict[int, dict[str, str]] = {}
    for fragment in fragments:
        call = calls.setdefault(fragment.index, {"id": "", "name": "", "arguments": ""})
        call["id"] += fragment.id
        call["name"] += fragment.name
        call["arguments"] += fragment.arguments
    assert calls[0]["id"] == "call_a"
    assert calls[0]["name"] == "current_time"
    assert json.loads(calls[0]["arguments"]) == {"timezone": "Europe/Paris"}
    assert calls[1]["id"] == "call_b"
    assert calls[1]["name"] == "calculate"
    assert json.loads(calls[1]["arguments"]) == {"expression": "2*(3+4)"}
    assert deltas[-1] == FinishDelta("tool_calls")


async def test_a_slow_stream_is_not_cut_by_the_first_token_timeout_once_it_started(
    fake: FakeOpenAI,
) -> None:
    chat = make_model(fake, first_token_timeout=0.5)
    fake.enqueue(FakeReply(text=[f"w{i} " for i in range(15)], delay=0.05))
    try:
        deltas, error = await run(chat, ask("slowly"))
    finally:
        await chat.aclose()

    assert error is None
    assert "".join(d.text for d in deltas if isinstance(d, TextDelta)).split() == [
        f"w{i}" for i in range(15)
    ]


async def test_a_finished_stream_leaves_its_connection_open_for_the_next_request(
    fake: FakeOpenAI, model: OpenAIChatModel
) -> None:
    first, _ = await run(model, ask("one"))
    second, _ = await run(model, ask("two"))

    assert first[-1] == second[-1] == FinishDelta("stop")
    assert len(fake.requests) == 2
    assert fake.connections == 1


async def test_the_name_says_provider_and_model(model: OpenAIChatModel) -> None:
    assert model.name == "openai:gpt-test"


# --- the request ---------------------------------------------------------------------


async def test_request_carries_model_streaming_usage_tools_and_mapped_messages(
    fake: FakeOpenAI, model: OpenAIChatModel
) -> None:
    messages = [
        Message("1", Role.SYSTEM, [TextPart("Be brief.")]),
        Message("2", Role.DEVELOPER, [TextPart("Use tools.")]),
        Message(
            "3",
            Role.USER,
            [
                TextPart("What is in these?"),
                ImagePart(url="https://example.com/cat.png"),
                ImagePart(data=b"\x89PNG", mime_type="image/png"),
            ],
        ),
        Message(
            "4",
            Role.ASSISTANT,
            [TextPart("Let me check.")],
            tool_calls=[ToolCall("call_1", "calculate", '{"expression": "1+1"}')],
        ),
        Message("5", Role.TOOL, [TextPart('{"result": 2}')], tool_call_id="call_1"),
        Message("6", Role.ASSISTANT, [TextPart("It is 2.")]),
        Message("7", Role.USER, [TextPart("Thanks")], name="ada"),
    ]
    tool = ToolSpec(
        "calculate",
        "Evaluate arithmetic.",
        {"type": "object", "properties": {"expression": {"type": "string"}}},
    )

    _, error = await run(model, ChatRequest(messages, [tool, ToolSpec("noop", "Nothing.", {})]))

    assert error is None
    body = fake.requests[0]
    assert body["model"] == "gpt-test"
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "calculate",
                "description": "Evaluate arithmetic.",
                "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}},
            },
        },
        {
            "type": "function",
            "function": {
                "name": "noop",
                "description": "Nothing.",
                "parameters": {"type": "object", "properties": {}},
            },
        },
    ]
    assert body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "system", "content": "Use tools."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is in these?"},
                {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw=="}},
            ],
        },
        {
            "role": "assistant",
            "content": "Let me check.",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "calculate", "arguments": '{"expression": "1+1"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": '{"result": 2}'},
        {"role": "assistant", "content": "It is 2."},
        {"role": "user", "content": "Thanks", "name": "ada"},
    ]


async def test_a_request_without_tools_sends_no_tools_field(
    fake: FakeOpenAI, model: OpenAIChatModel
) -> None:
    await run(model, ask("hi"))

    assert "tools" not in fake.requests[0]


async def test_the_api_key_is_sent_as_a_bearer_token() -> None:
    with FakeOpenAI(api_key="sk-right") as server:
        chat = make_model(server, api_key="sk-right")
        try:
            deltas, error = await run(chat, ask("hi"))
        finally:
            await chat.aclose()

    assert error is None
    assert "".join(d.text for d in deltas if isinstance(d, TextDelta)).startswith("Echo: ")


# --- failures ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (400, "llm_bad_request"),
        (401, "llm_auth"),
        (403, "llm_auth"),
        (404, "llm_bad_request"),
        (429, "llm_rate_limited"),
        (500, "llm_server_error"),
        (503, "llm_server_error"),
    ],
)
async def test_an_http_error_status_becomes_its_error_code_before_any_delta(
    fake: FakeOpenAI, model: OpenAIChatModel, status: int, code: str
) -> None:
    fake.enqueue(FakeReply(status=status, error_message="nope, says the server"))

    deltas, error = await run(model, ask("hi"))

    assert deltas == []
    assert error is not None
    assert error.code == code
    # The provider's code and a plain cause; never a bare status, the server's text or URL.
    assert "answered HTTP" not in error.message
    assert re.search(r"\([a-z_]+\)", error.message)
    assert "nope" not in error.message and "127.0.0.1" not in error.message
    assert f"{fake.base_url}/chat/completions" in error.detail
    assert "nope, says the server" in error.detail


async def test_a_refused_connection_is_llm_unavailable_with_the_endpoint_in_the_detail() -> None:
    base_url = f"http://127.0.0.1:{free_port()}/v1"
    chat = OpenAIChatModel(base_url=base_url, api_key="k", model="m", max_retries=0)
    try:
        deltas, error = await run(chat, ask("hi"))
    finally:
        await chat.aclose()

    assert deltas == []
    assert error is not None
    assert error.code == "llm_unavailable"
    assert error.message == "cannot reach the LLM endpoint"
    assert base_url in error.detail


async def test_a_wrong_api_key_is_llm_auth_and_not_retried() -> None:
    with FakeOpenAI(api_key="sk-right") as server:
        chat = make_model(server, max_retries=2)
        try:
            deltas, error = await run(chat, ask("hi"))
        finally:
            await chat.aclose()

        assert len(server.requests) == 1
    assert deltas == []
    assert error is not None
    assert error.code == "llm_auth"


@pytest.mark.parametrize("status", [429, 500, 503])
async def test_a_passing_failure_before_the_first_token_is_retried_and_the_retry_succeeds(
    fake: FakeOpenAI, status: int
) -> None:
    chat = make_model(fake, max_retries=2)
    fake.enqueue(FakeReply(status=status), FakeReply(text="second time lucky"))
    try:
        deltas, error = await run(chat, ask("hi"))
    finally:
        await chat.aclose()

    assert error is None
    assert "".join(d.text for d in deltas if isinstance(d, TextDelta)) == "second time lucky"
    assert len(fake.requests) == 2


async def test_retries_stop_after_max_retries_with_the_last_error(fake: FakeOpenAI) -> None:
    chat = make_model(fake, max_retries=2)
    fake.enqueue(*[FakeReply(status=500)] * 4)
    try:
        deltas, error = await run(chat, ask("hi"))
    finally:
        await chat.aclose()

    assert deltas == []
    assert error is not None
    assert error.code == "llm_server_error"
    assert len(fake.requests) == 3


async def test_a_first_token_timeout_is_llm_timeout_and_the_fake_sees_the_connection_close(
    fake: FakeOpenAI,
) -> None:
    chat = make_model(fake, first_token_timeout=0.2)
    fake.enqueue(FakeReply(text="never", hang_after=1))
    try:
        deltas, error = await run(chat, ask("hi"))
    finally:
        await chat.aclose()

    assert deltas == []
    assert error is not None
    assert error.code == "llm_timeout"
    assert "0.2s" in error.message
    assert await fake.wait_connection_closed_async(WAIT)


async def test_a_first_token_timeout_is_retried_and_the_retry_succeeds(fake: FakeOpenAI) -> None:
    chat = make_model(fake, first_token_timeout=0.2, max_retries=1)
    fake.enqueue(FakeReply(text="never", hang_after=0), FakeReply(text="there you go"))
    try:
        deltas, error = await run(chat, ask("hi"))
    finally:
        await chat.aclose()

    assert error is None
    assert "".join(d.text for d in deltas if isinstance(d, TextDelta)) == "there you go"
    assert len(fake.requests) == 2


async def test_a_stall_after_the_first_token_is_llm_timeout_and_never_retried(
    fake: FakeOpenAI,
) -> None:
    chat = make_model(fake, timeout=0.2, max_retries=2)
    fake.enqueue(FakeReply(text=["a", "b"], hang_after=2))
    try:
        deltas, error = await run(chat, ask("hi"))
    finally:
        await chat.aclose()

    assert deltas == [TextDelta("a")]
    assert error is not None
    assert error.code == "llm_timeout"
    assert len(fake.requests) == 1


async def test_keep_alive_comments_after_the_first_token_are_no_data_and_the_stream_stalls(
    fake: FakeOpenAI,
) -> None:
    # One token, then ": keep-alive" every 50 ms (as OpenRouter and LiteLLM send): bytes,
    # but no data for the read timeout.
    chat = make_model(fake, timeout=0.3, max_retries=2)
    fake.enqueue(FakeReply(text=["a", "never"], comments_after=2))
    started = asyncio.get_running_loop().time()
    try:
        deltas, error = await run(chat, ask("hi"))
    finally:
        await chat.aclose()

    assert deltas == [TextDelta("a")]
    assert error is not None
    assert error.code == "llm_timeout"
    assert error.message == "the stream from the LLM stalled: no data for 0.3s ([llm] timeout)"
    assert asyncio.get_running_loop().time() - started >= 0.25
    assert len(fake.requests) == 1
    assert await fake.wait_connection_closed_async(WAIT)


async def test_keep_alive_comments_before_the_first_token_leave_it_to_first_token_timeout(
    fake: FakeOpenAI,
) -> None:
    # Before the first token the wait is first_token_timeout's: comments neither cut it
    # short (a read timeout of 0.1 s) nor make it longer.
    chat = make_model(fake, timeout=0.1, first_token_timeout=0.5)
    fake.enqueue(FakeReply(text=["never"], comments_after=1))
    started = asyncio.get_running_loop().time()
    try:
        deltas, error = await run(chat, ask("hi"))
    finally:
        await chat.aclose()

    assert deltas == []
    assert error is not None
    assert error.code == "llm_timeout"
    assert error.message == "the LLM endpoint sent nothing for 0.5s"
    assert asyncio.get_running_loop().time() - started >= 0.45
    assert await fake.wait_connection_closed_async(WAIT)


async def test_a_connection_dropped_mid_stream_is_llm_bad_stream_after_the_deltas_so_far(
    fake: FakeOpenAI,
) -> None:
    chat = make_model(fake, max_retries=2)
    fake.enqueue(FakeReply(text=["a", "b", "c", "d"], drop_after=3))
    try:
        deltas, error = await run(chat, ask("hi"))
    finally:
        await chat.aclose()

    assert "".join(d.text for d in deltas if isinstance(d, TextDelta)) == "ab"
    assert error is not None
    assert error.code == "llm_bad_stream"
    assert error.message == "the stream from the LLM broke off"
    assert fake.base_url in error.detail
    assert "the connection closed inside a chunked body" in error.detail
    assert len(fake.requests) == 1


async def test_invalid_json_mid_stream_is_llm_bad_stream_and_never_retried(
    fake: FakeOpenAI,
) -> None:
    chat = make_model(fake, max_retries=2)
    fake.enqueue(FakeReply(text=["a", "b"], malformed_after=2))
    try:
        deltas, error = await run(chat, ask("hi"))
    finally:
        await chat.aclose()

    assert "".join(d.text for d in deltas if isinstance(d, TextDelta)) == "a"
    assert error is not None
    assert error.code == "llm_bad_stream"
    assert "invalid JSON" in error.message
    assert len(fake.requests) == 1


async def test_invalid_json_before_the_first_token_yields_nothing(
    fake: FakeOpenAI, model: OpenAIChatModel
) -> None:
    fake.enqueue(FakeReply(text=["a"], malformed_after=0))

    deltas, error = await run(model, ask("hi"))

    assert deltas == []
    assert error is not None
    assert error.code == "llm_bad_stream"


# --- stopping ------------------------------------------------------------------------


async def test_cancelling_the_consumer_closes_the_http_connection_at_once(
    fake: FakeOpenAI, model: OpenAIChatModel
) -> None:
    fake.enqueue(FakeReply(text=["first", "never"], hang_after=2))
    first = asyncio.Event()
    seen: list[ChatDelta] = []

    async def consume() -> None:
        async for delta in model.stream(ask("hi")):
            seen.append(delta)
            first.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(first.wait(), WAIT)
    assert not fake.connection_closed.is_set()

    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    assert seen == [TextDelta("first")]
    assert await fake.wait_connection_closed_async(WAIT)


async def test_closing_the_stream_early_closes_the_http_connection(
    fake: FakeOpenAI, model: OpenAIChatModel
) -> None:
    fake.enqueue(FakeReply(text=["first", "never"], hang_after=2))
    stream = cast(AsyncGenerator[ChatDelta, None], model.stream(ask("hi")))

    first = await asyncio.wait_for(anext(stream), WAIT)
    await asyncio.wait_for(stream.aclose(), WAIT)

    assert first == TextDelta("first")
    assert await fake.wait_connection_closed_async(WAIT)


# --- the provider's refusals in plain words (llm/refusals.py) --------------------------


@pytest.mark.parametrize(
    ("status", "body", "code", "words"),
    [
        (
            400,
            {
                "error": {
                    "code": "context_length_exceeded",
                    "message": "This model's maximum context length is 4000 tokens",
                    "type": "invalid_request_error",
                    "param": "messages",
                }
            },
            "llm_context_too_long",
            "too long for the model (context_length_exceeded)",
        ),
        (
            400,
            {
                "object": "error",
                "message": "This model's maximum context length is 4096 "
                "tokens. However, you requested 5000 tokens",
                "type": "BadRequestError",
            },
            "llm_context_too_long",
            "too long for the model",
        ),
        (
            400,
            {
                "error": {
                    "code": 400,
                    "message": "the request exceeds the available context size, try increasing it",
                    "type": "exceed_context_size_error",
                }
            },
            "llm_context_too_long",
            "too long for the model",
        ),
        (
            400,
            {"error": "input length exceeds the context length"},
            "llm_context_too_long",
            "too long for the model",
        ),
        (
            404,
            {
                "error": {
                    "code": "model_not_found",
                    "message": "The model `gpt-9` does not "
                    "exist at https://internal.example:8443/v1 sk-abc123",
                    "type": "invalid_request_error",
                }
            },
            "llm_bad_request",
            "unknown model",
        ),
        (
            401,
            {
                "error": {
                    "code": "invalid_api_key",
                    "message": "Incorrect API key provided: sk-abc123",
                    "type": "invalid_request_error",
                }
            },
            "llm_auth",
            "refused the API key",
        ),
        (
            400,
            {
                "error": {
                    "code": "invalid_value",
                    "message": "temperature at 10.0.0.5 bad",
                    "type": "invalid_request_error",
                    "param": "temperature",
                }
            },
            "llm_bad_request",
            "parameter 'temperature'",
        ),
    ],
)
async def test_a_refusal_names_the_provider_code_and_a_plain_cause_without_internals(
    fake: FakeOpenAI,
    model: OpenAIChatModel,
    status: int,
    body: dict[str, object],
    code: str,
    words: str,
) -> None:
    fake.enqueue(FakeReply(status=status, error_body=body))

    _, error = await run(model, ask("hi"))

    assert error is not None
    assert (error.code, words in error.message) == (code, True), error.message
    for internal in ("https://", "internal.example", "sk-abc123", "10.0.0.5", "127.0.0.1"):
        assert internal not in error.message
    assert "answered HTTP" in error.detail


async def test_a_provider_code_that_is_not_snake_case_is_left_out(
    fake: FakeOpenAI, model: OpenAIChatModel
) -> None:
    body = {"error": {"code": "gw.internal.example:8443", "message": "no", "param": "10.0.0.5"}}
    fake.enqueue(FakeReply(status=400, error_body=body))

    _, error = await run(model, ask("hi"))

    assert error is not None
    assert error.message == "the LLM refused a parameter of the request (HTTP 400)"
    assert "gw.internal.example" in error.detail


# --- parsing the stream -------------------------------------------------------------------


def test_chunks_read_as_json_reads_them_even_where_the_fast_parser_refuses() -> None:
    """Each event is read by orjson, and by ``json`` where orjson refuses what ``json``
    accepts (NaN, a lone surrogate, UTF-16): a stream reads as it always did; what is not
    JSON at all is still a bad stream."""
    import orjson

    from engine_service.llm import openai_chat
    from engine_service.llm.openai_chat import _ChunkParser

    def chunk(text: str, extra: str = "") -> bytes:
        return (
            '{"object":"chat.completion.chunk"' + extra + ',"choices":[{"index":0,'
            '"delta":{"content":' + json.dumps(text) + '},"finish_reason":null}]}'
        ).encode()

    parser = _ChunkParser("http://llm.test")
    assert openai_chat._fast_loads is orjson.loads  # imported by the first stream read
    deltas = parser.feed(
        [
            chunk("plain "),
            chunk("big ", ',"created":123456789012345678901234567890'),
            chunk("nan ", ',"score":NaN'),
            chunk("ü ", ',"odd":"\\ud800"'),
            "\ufeff".encode("utf-16-le") + chunk("wide").decode().encode("utf-16-le"),
        ]
    )
    assert parser.error is None, parser.error
    assert [d.text for d in deltas if isinstance(d, TextDelta)] == ["plain big nan ü wide"]

    parser = _ChunkParser("http://llm.test")
    assert parser.feed([chunk("a"), b'{"choices": [', chunk("never")]) == [TextDelta("a")]
    assert parser.error is not None and parser.error.code == "llm_bad_stream"


def test_a_request_body_is_the_json_the_standard_library_writes() -> None:
    """The body is written by orjson, byte for byte what ``json.dumps`` (compact, UTF-8 kept)
    writes for what a request holds; an integer past 64 bits in a tool's schema, which
    orjson refuses, is written by ``json``."""
    from engine_service.llm.openai_chat import _dumps

    schema: dict[str, Any] = {
        "type": "object",
        "properties": {"n": {"type": "integer", "maximum": 10.5}},
    }
    tools = to_openai_tools(
        [
            ToolSpec(
                "pick",
                'Pick one — «quoted», 日本語, emoji 🎉, a "quote" and a \\ backslash.',
                schema,
            )
        ]
    )
    payload: dict[str, object] = {
        "model": "gpt-test",
        "messages": [{"role": "user", "content": "line\nbreak\ttab \u2028 \x00 ü"}],
        "stream": True,
        "stream_options": {"include_usage": True},
        "tools": tools,
    }
    standard = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode()
    assert _dumps(payload) == standard

    schema["properties"]["n"]["maximum"] = 2**70
    sent = json.loads(_dumps(payload))
    assert sent["tools"][0]["function"]["parameters"]["properties"]["n"]["maximum"] == 2**70
