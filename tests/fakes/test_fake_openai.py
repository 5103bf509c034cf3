"""The fake OpenAI server speaks the protocol well enough for the ``openai`` client's parsing."""

from __future__ import annotations

import contextlib
import json
import re
import select
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from openai.types.chat import ChatCompletionChunk

from tests.fakes.fake_openai import FakeOpenAI, FakeReply, FakeToolCall

WAIT = 5.0
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


@pytest.fixture
def client(fake: FakeOpenAI) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=fake.base_url, api_key="k", max_retries=0, timeout=WAIT) as c:
        yield c


def stream(client: openai.OpenAI, text: str) -> list[ChatCompletionChunk]:
    chunks = client.chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": text}],
        stream=True,
        stream_options={"include_usage": True},
    )
    return list(chunks)


def streamed_text(chunks: list[ChatCompletionChunk]) -> str:
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def test_a_scripted_stream_parses_into_text_reasoning_tool_calls_and_usage(
    fake: FakeOpenAI, client: openai.OpenAI
) -> None:
    fake.enqueue(
        FakeReply(
            reasoning="Hmm, sure.",
            text=["Hel", "lo"],
            tool_calls=[FakeToolCall("calculate", {"expression": "1+2"}, id="call_x")],
            usage=(11, 5),
        )
    )

    chunks = stream(client, "hi")

    assert chunks[0].choices[0].delta.role == "assistant"
    reasoning = [
        (c.choices[0].delta.model_extra or {}).get("reasoning_content") for c in chunks if c.choices
    ]
    assert "".join(r for r in reasoning if r) == "Hmm, sure."
    assert streamed_text(chunks) == "Hello"
    fragments = [t for c in chunks if c.choices for t in c.choices[0].delta.tool_calls or []]
    assert fragments[0].id == "call_x"
    assert fragments[0].function is not None
    assert fragments[0].function.name == "calculate"
    arguments = "".join(f.function.arguments or "" for f in fragments if f.function)
    assert json.loads(arguments) == {"expression": "1+2"}
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None
    assert (chunks[-1].usage.prompt_tokens, chunks[-1].usage.completion_tokens) == (11, 5)


def test_a_non_streamed_request_gets_one_chat_completion(
    fake: FakeOpenAI, client: openai.OpenAI
) -> None:
    fake.enqueue(FakeReply(text="All at once.", tool_calls=[FakeToolCall("noop", id="call_1")]))

    completion = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}]
    )

    message = completion.choices[0].message
    assert message.content == "All at once."
    assert message.tool_calls is not None
    assert [c.id for c in message.tool_calls] == ["call_1"]
    assert completion.choices[0].finish_reason == "tool_calls"


def test_by_default_the_last_user_message_is_echoed_in_word_chunks(
    fake: FakeOpenAI, client: openai.OpenAI
) -> None:
    chunks = stream(client, "hello there world")

    texts = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert texts == ["Echo: ", "hello ", "there ", "world"]
    assert fake.requests[0]["messages"] == [{"role": "user", "content": "hello there world"}]


def test_by_default_tool_results_are_answered_with_result(
    fake: FakeOpenAI, client: openai.OpenAI
) -> None:
    chunks = client.chat.completions.create(
        model="m",
        stream=True,
        messages=[
            {"role": "user", "content": "[[tool:calculate {}]]"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "calculate", "arguments": "{}"},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "42"},
        ],
    )

    assert streamed_text(list(chunks)) == "Result: 42"


def test_tool_directives_make_parallel_tool_calls_and_leave_the_rest_echoed(
    client: openai.OpenAI,
) -> None:
    chunks = stream(
        client,
        'go [[tool:current_time {"timezone": "UTC"}]] [[tool:calculate {"expression": "[1]"}]]',
    )

    calls: dict[int, dict[str, str]] = {}
    for chunk in chunks:
        for fragment in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            call = calls.setdefault(fragment.index, {"name": "", "arguments": ""})
            if fragment.function is not None:
                call["name"] += fragment.function.name or ""
                call["arguments"] += fragment.function.arguments or ""
    assert [calls[i]["name"] for i in sorted(calls)] == ["current_time", "calculate"]
    assert json.loads(calls[0]["arguments"]) == {"timezone": "UTC"}
    assert json.loads(calls[1]["arguments"]) == {"expression": "[1]"}
    assert streamed_text(chunks) == "Echo: go"


def test_the_chunks_directive_streams_exactly_that_many_text_chunks(client: openai.OpenAI) -> None:
    chunks = stream(client, "[[chunks:500]]")

    texts = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(texts) == 500
    assert texts[0] == "w0 "
    assert texts[-1] == "w499 "


def test_the_reason_directive_streams_reasoning_before_the_text(client: openai.OpenAI) -> None:
    chunks = stream(client, "[[reason]] why")

    kinds = []
    for chunk in chunks:
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        if (delta.model_extra or {}).get("reasoning_content"):
            kinds.append("reasoning")
        elif delta.content:
            kinds.append("text")
    assert kinds[0] == "reasoning"
    assert kinds.index("text") == kinds.count("reasoning")
    assert streamed_text(chunks) == "Echo: why"


@pytest.mark.parametrize(
    ("status", "error"),
    [
        (401, openai.AuthenticationError),
        (429, openai.RateLimitError),
        (500, openai.InternalServerError),
        (503, openai.InternalServerError),
    ],
)
def test_the_error_directive_answers_that_status_with_an_openai_error_body(
    client: openai.OpenAI, status: int, error: type[openai.APIStatusError]
) -> None:
    with pytest.raises(error) as raised:
        stream(client, f"[[error:{status}]]")

    assert raised.value.status_code == status
    assert isinstance(raised.value.body, dict)
    assert raised.value.body["message"]


def test_the_slow_directive_waits_before_each_chunk(client: openai.OpenAI) -> None:
    started = time.monotonic()
    chunks = stream(client, "[[slow:0.02]] a b c")

    assert streamed_text(chunks) == "Echo: a b c"
    assert time.monotonic() - started >= 0.02 * len(chunks)


def test_a_client_leaving_a_hanging_stream_is_seen_as_a_closed_connection(
    fake: FakeOpenAI, client: openai.OpenAI
) -> None:
    chunks = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "wait [[hang]]"}], stream=True
    )
    received = []
    for chunk in chunks:
        received.append(chunk)
        if chunk.choices and chunk.choices[0].delta.content:
            break
    assert not fake.connection_closed.is_set()

    chunks.close()

    assert fake.wait_connection_closed(WAIT)
    assert fake.closed_mid_stream == 1
    assert streamed_text(received) == "Echo: "


def test_the_drop_directive_cuts_the_stream_after_the_first_text_chunk(
    client: openai.OpenAI,
) -> None:
    received: list[ChatCompletionChunk] = []
    with pytest.raises(openai.APIError):
        for chunk in client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "a b [[drop]]"}], stream=True
        ):
            received.append(chunk)

    assert streamed_text(received) == "Echo: "


@contextlib.contextmanager
def standalone(module: str) -> Iterator[str]:
    """``python -m <module> --port 0`` running: the base URL it printed (checked)."""
    process = subprocess.Popen(
        [sys.executable, "-m", module, "--port", "0"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        ready, _, _ = select.select([process.stdout], [], [], WAIT)
        assert ready, "no base URL printed"
        base_url = process.stdout.readline().strip()
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/v1", base_url), base_url
        yield base_url
    finally:
        process.terminate()
        process.wait(WAIT)
        if process.stdout is not None:
            process.stdout.close()


def test_it_runs_standalone_and_prints_its_base_url() -> None:
    with (
        standalone("tests.fakes.fake_openai") as base_url,
        openai.OpenAI(base_url=base_url, api_key="k", max_retries=0, timeout=WAIT) as c,
    ):
        assert streamed_text(stream(c, "standalone")) == "Echo: standalone"


def test_stopping_the_fake_ends_a_hanging_stream(fake: FakeOpenAI) -> None:
    host, port = fake.host, fake.port
    body = json.dumps(
        {"model": "m", "stream": True, "messages": [{"role": "user", "content": "[[hang]]"}]}
    )
    with socket.create_connection((host, port), timeout=WAIT) as sock:
        sock.sendall(
            f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n{body}".encode()
        )
        first = sock.recv(65536)
        assert first.startswith(b"HTTP/1.1 200")

        fake.stop()

        rest = b""
        while chunk := sock.recv(65536):
            rest += chunk
    assert b"0\r\n\r\n" not in rest  # cut, not finished


def test_an_endless_reply_repeats_its_text_until_the_client_leaves(
    fake: FakeOpenAI, client: openai.OpenAI
) -> None:
    fake.enqueue(FakeReply(text="loop ", endless=True))
    chunks = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "x"}], stream=True
    )
    text = ""
    for chunk in chunks:
        text += chunk.choices[0].delta.content or "" if chunk.choices else ""
        if len(text) >= 5000:
            break
    chunks.close()

    assert text.startswith("loop loop loop ")
    assert fake.wait_connection_closed(WAIT)


def test_comments_after_n_chunks_are_all_a_client_gets_from_then_on(fake: FakeOpenAI) -> None:
    fake.enqueue(FakeReply(text=["a", "b"], comments_after=2, comment_every=0.01))
    body = json.dumps({"model": "m", "messages": [], "stream": True}).encode()
    with socket.create_connection(("127.0.0.1", fake.port), timeout=WAIT) as sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
        )
        received = b""
        while received.count(b": keep-alive") < 5:
            piece = sock.recv(65536)
            assert piece, "the fake closed the stream"
            received += piece

    assert b'"content": "a"' in received
    assert b'"content": "b"' not in received
    assert fake.wait_connection_closed(WAIT)
