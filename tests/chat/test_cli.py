"""``echo ... | agentik chat``: one message, the answer on stdout, an exit code per outcome."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from agentik_chat.cli import (
    EXIT_INPUT_REQUIRED,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    conversation_lines,
)
from tests.chat.conftest import CHAT, chat_env, run_chat
from tests.fakes.fake_openai import FakeOpenAI
from tests.web.e2e.conftest import ROOT, WAIT, Stack, free_port, wait_for

pytestmark = [pytest.mark.processes, pytest.mark.signals]


def _messages(stack: Stack, conversation_id: str) -> list[dict[str, object]]:
    with stack.client() as http:
        items: list[dict[str, object]] = http.get(
            f"/agentik/conversations/{conversation_id}/messages"
        ).json()["items"]
    return items


def _conversation_id(stderr: str) -> str:
    """The id the client names on stderr (``conversation ID``)."""
    return stderr.split("conversation ", 1)[1].split()[0]


def test_piped_stdin_is_one_message_and_the_answer_is_printed_on_stdout(stack: Stack) -> None:
    done = run_chat("hi\n", "--url", stack.base_url)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "Echo: hi\n"


def test_piped_stdin_keeps_its_lines_in_one_message(stack: Stack) -> None:
    done = run_chat("first line\nsecond line\n", "--url", stack.base_url)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "Echo: first line second line\n"


def test_the_url_defaults_to_agentik_http_addr(stack: Stack) -> None:
    done = run_chat("hi", AGENTIK_HTTP_ADDR=f"0.0.0.0:{stack.http_port}")
    assert (done.returncode, done.stdout) == (0, "Echo: hi\n"), done.stderr


def test_conversation_continues_a_conversation(stack: Stack) -> None:
    with stack.client() as http:
        conversation_id = http.post("/agentik/conversations", json={}).json()["id"]
    for text in ("one", "two"):
        done = run_chat(text, "--url", stack.base_url, "--conversation", conversation_id)
        assert done.returncode == 0, done.stderr
        assert done.stdout == f"Echo: {text}\n"
    said = [m["content"] for m in _messages(stack, conversation_id) if m["role"] == "user"]
    assert said == [[{"type": "text", "text": "one"}], [{"type": "text", "text": "two"}]]


def test_tool_calls_and_reasoning_go_to_stderr_so_stdout_is_the_answer(stack: Stack) -> None:
    with stack.client() as http:
        conversation_id = http.post("/agentik/conversations", json={}).json()["id"]
    done = run_chat(
        '[[reason]] [[tool:current_time {"timezone": "UTC"}]] now',
        "--url",
        stack.base_url,
        "--conversation",
        conversation_id,
    )
    assert done.returncode == 0, done.stderr
    said, result = done.stdout.splitlines()
    assert said == "Echo: now"  # the text before the call, then the answer after it
    assert result.startswith('Result: {"timezone": "UTC"'), done.stdout
    assert "thinking: " in done.stderr
    assert '→ current_time {"timezone": "UTC"}' in done.stderr
    assert "← current_time: {" in done.stderr


def test_an_approval_in_piped_mode_is_printed_and_exits_with_its_own_code(stack: Stack) -> None:
    done = run_chat('[[tool:calculate {"expression": "2+2"}]]', "--url", stack.base_url)
    assert done.returncode == EXIT_INPUT_REQUIRED, done.stderr
    assert done.stdout == ""
    assert 'Approve calling calculate with {"expression": "2+2"}?' in done.stderr
    conversation_id = _conversation_id(done.stderr)
    assert f"agentik chat --conversation {conversation_id}" in done.stderr

    again = run_chat("hello?", "--url", stack.base_url, "--conversation", conversation_id)
    assert again.returncode == EXIT_INPUT_REQUIRED, again.stderr
    assert "Approve calling calculate" in again.stderr


def test_an_error_event_exits_non_zero_naming_it(stack: Stack) -> None:
    done = run_chat("[[error:500]] hi", "--url", stack.base_url)
    assert done.returncode == 1
    assert "error: " in done.stderr and "llm_" in done.stderr, done.stderr


def test_an_unknown_conversation_is_refused_naming_it(stack: Stack) -> None:
    done = run_chat("hi", "--url", stack.base_url, "--conversation", "nope")
    assert done.returncode == 1
    assert "nope" in done.stderr and "/list" in done.stderr, done.stderr


def test_empty_stdin_sends_nothing(stack: Stack) -> None:
    done = run_chat("  \n", "--url", stack.base_url)
    assert done.returncode == EXIT_USAGE
    assert done.stderr == "agentik: nothing to send: stdin was empty\n"


def test_a_server_that_is_down_is_named_with_what_to_do() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    done = run_chat("hi", "--url", url)
    assert done.returncode == 1
    assert done.stderr == f"agentik: cannot reach agentik at {url}: is `make run` running?\n"


def test_a_url_that_is_not_agentik_is_named(stack: Stack) -> None:
    done = run_chat("hi", "--url", f"{stack.base_url}/nothing-here")
    assert done.returncode == 1
    assert "not_found" not in done.stderr and stack.base_url in done.stderr, done.stderr
    assert "/list" not in done.stderr, done.stderr  # no conversation is missing
    assert "--url is the address `agentik serve` prints" in done.stderr, done.stderr


def test_a_url_ending_in_agentik_is_named_with_the_url_to_give(stack: Stack) -> None:
    done = run_chat("hi", "--url", f"{stack.base_url}/agentik")
    assert done.returncode == 1
    assert done.stderr.endswith(f"(leave /agentik out of --url: --url {stack.base_url})\n"), (
        done.stderr
    )
    assert "/list" not in done.stderr, done.stderr


def test_list_lines_up_its_columns_whatever_the_ids_lengths() -> None:
    conversations = [
        {"id": "py-1", "updated_at": "2026-12-07T10:00:00Z", "count": 2, "title": "first"},
        {"id": "buf-1", "updated_at": "2026-12-07T10:01:30Z", "count": 12, "title": ""},
    ]
    assert conversation_lines(conversations, "buf-1") == [
        "  py-1   2026-12-07 10:00     2 msgs  first",
        "* buf-1  2026-12-07 10:01    12 msgs  (untitled)",
    ]


# --- with tokens ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def auth_stack(llm: FakeOpenAI, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    running = Stack(llm, tmp_path_factory.mktemp("chat-auth"), AGENTIK_TOKENS="alice:tokenA")
    yield running
    running.stop()


def test_a_missing_token_says_to_set_agentik_token(auth_stack: Stack) -> None:
    done = run_chat("hi", "--url", auth_stack.base_url)
    assert done.returncode == 1
    assert "set AGENTIK_TOKEN" in done.stderr, done.stderr


def test_a_bad_token_is_refused_naming_where_it_came_from(auth_stack: Stack) -> None:
    done = run_chat("hi", "--url", auth_stack.base_url, AGENTIK_TOKEN="wrong")
    assert done.returncode == 1
    assert "the token in AGENTIK_TOKEN was refused" in done.stderr, done.stderr
    flag = run_chat("hi", "--url", auth_stack.base_url, "--token", "wrong", AGENTIK_TOKEN="tokenA")
    assert "the token in --token was refused" in flag.stderr, flag.stderr


def test_the_token_from_agentik_token_is_sent_as_bearer(auth_stack: Stack) -> None:
    done = run_chat("hi", "--url", auth_stack.base_url, AGENTIK_TOKEN="tokenA")
    assert (done.returncode, done.stdout) == (0, "Echo: hi\n"), done.stderr
    headers = {"Authorization": "Bearer tokenA"}
    listed = httpx.get(f"{auth_stack.base_url}/agentik/conversations", headers=headers).json()
    assert listed["total"] == 1


def _piped(stack: Stack, tmp_path: Path, text: str) -> tuple[subprocess.Popen[bytes], Path, Path]:
    """``agentik chat`` with ``text`` piped in, its output to files; still running."""
    (tmp_path / "in").write_text(text)
    out, err = tmp_path / "out", tmp_path / "err"
    with (tmp_path / "in").open() as stdin, out.open("w") as stdout, err.open("w") as stderr:
        chat = subprocess.Popen(
            [*CHAT, "--url", stack.base_url],
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            env=chat_env(),
            cwd=ROOT,
        )
    return chat, out, err


def test_a_turn_whose_stream_breaks_is_picked_up_again_without_loss_or_repeat(
    stack: Stack, tmp_path: Path
) -> None:
    """The facade restarts mid-turn: the client follows /events after the last event it saw."""
    chat, out, err = _piped(stack, tmp_path, "[[chunks:400]][[slow:0.01]]")
    try:
        wait_for(lambda: "w3 " in out.read_text(), "the answer to stream")
        stack.web.stop()
        stack.start_web()
        assert chat.wait(WAIT) == 0, err.read_text()
    finally:
        if chat.poll() is None:
            chat.kill()
            chat.wait(WAIT)
    assert out.read_text() == "".join(f"w{i} " for i in range(400)) + "\n"
    assert "picking the turn up again" in err.read_text()


def test_ctrl_c_interrupts_a_piped_turn_and_exits_130(stack: Stack, tmp_path: Path) -> None:
    chat, out, err = _piped(stack, tmp_path, "[[chunks:2000]][[slow:0.01]]")
    try:
        wait_for(lambda: "w3 " in out.read_text(), "the answer to stream")
        chat.send_signal(signal.SIGINT)
        assert chat.wait(WAIT) == EXIT_INTERRUPTED, err.read_text()
    finally:
        if chat.poll() is None:
            chat.kill()
            chat.wait(WAIT)
    assert "[interrupted]" in err.read_text()
    with stack.client() as http:
        conversation = http.get("/agentik/conversations").json()["items"][0]  # the latest
        assert conversation["active_run_id"] is None
        answer = http.get(f"/agentik/conversations/{conversation['id']}/messages").json()
    assert answer["items"][-1]["status"] == "interrupted"


def test_piped_mode_names_the_conversation_on_stderr_and_continue_reuses_it(
    stack: Stack, state_home: Path
) -> None:
    first = run_chat("one", "--url", stack.base_url)
    assert (first.returncode, first.stdout) == (0, "Echo: one\n"), first.stderr
    conversation_id = _conversation_id(first.stderr)
    assert "agentik chat --continue" in first.stderr

    second = run_chat("two", "--url", stack.base_url, "--continue")

    assert (second.returncode, second.stdout) == (0, "Echo: two\n"), second.stderr
    assert _conversation_id(second.stderr) == conversation_id
    said = [m["content"] for m in _messages(stack, conversation_id) if m["role"] == "user"]
    assert said == [[{"type": "text", "text": "one"}], [{"type": "text", "text": "two"}]]
    assert conversation_id in (state_home / "agentik" / "chat.json").read_text()


def test_continue_with_no_last_conversation_says_so(stack: Stack) -> None:
    done = run_chat("hi", "--url", stack.base_url, "--continue")

    assert done.returncode == 1
    assert done.stdout == ""
    assert "no last conversation with" in done.stderr and "without --continue" in done.stderr


def test_conversation_takes_a_unique_prefix_of_an_id(stack: Stack) -> None:
    with stack.client() as http:
        conversation_id = http.post("/agentik/conversations", json={}).json()["id"]

    done = run_chat("by prefix", "--url", stack.base_url, "--conversation", conversation_id[:10])

    assert (done.returncode, done.stdout) == (0, "Echo: by prefix\n"), done.stderr
    assert _conversation_id(done.stderr) == conversation_id


def test_a_prefix_that_matches_nothing_is_named(stack: Stack) -> None:
    done = run_chat("hi", "--url", stack.base_url, "--conversation", "zzzz-nothing")

    assert done.returncode == 1
    assert "no conversation matches 'zzzz-nothing'" in done.stderr


def test_a_url_without_a_scheme_is_dialled_over_http() -> None:
    url = f"127.0.0.1:{free_port()}"
    done = run_chat("hi", "--url", url)
    assert done.returncode == 1
    assert done.stderr == f"agentik: cannot reach agentik at http://{url}: is `make run` running?\n"


def test_a_url_of_another_scheme_is_refused_naming_it() -> None:
    done = run_chat("hi", "--url", "ftp://127.0.0.1:8000")
    assert done.returncode == EXIT_USAGE
    said = "agentik: --url 'ftp://127.0.0.1:8000' is not an http:// or https:// URL\n"
    assert done.stderr == said


def test_config_names_the_facade_by_its_http_addr(tmp_path: Path) -> None:
    port = free_port()
    config = tmp_path / "agentik.toml"
    config.write_text(f'[web]\nhttp_addr = "0.0.0.0:{port}"\n')
    for args in (["--config", str(config)], []):
        done = run_chat("hi", *args) if args else run_chat_before("hi", str(config))
        assert done.returncode == 1
        assert f"cannot reach agentik at http://127.0.0.1:{port}:" in done.stderr, done.stderr


def run_chat_before(stdin: str, config: str) -> subprocess.CompletedProcess[str]:
    """``agentik --config CONFIG chat``: the option before the command."""
    return subprocess.run(
        [*CHAT[:-1], "--config", config, "chat"],
        input=stdin,
        env=chat_env(),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=WAIT,
    )
