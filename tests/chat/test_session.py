"""``agentik chat`` on a terminal (a pseudo-terminal): turns, commands, approvals, Ctrl-C."""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pexpect
import pytest

from agentik_chat.api import AgentikClient, ChatError
from agentik_chat.cli import EXIT_INTERRUPTED
from agentik_chat.render import Renderer
from agentik_chat.session import ChatSession
from tests.chat.conftest import CHAT, chat_env
from tests.web.e2e.conftest import ROOT, WAIT, Stack, wait_for

pytestmark = [pytest.mark.processes, pytest.mark.signals]

PROMPT = "> "


class Terminal:
    """``agentik chat`` on a pty; every expectation is bounded by WAIT."""

    def __init__(self, stack: Stack, *args: str, prompt: bool = True) -> None:
        argv = [*CHAT, "--url", stack.base_url, *args]
        self.child = pexpect.spawn(
            argv[0], argv[1:], env=chat_env(), cwd=str(ROOT), encoding="utf-8", timeout=WAIT
        )
        self.child.expect_exact("/help for commands.")
        if prompt:
            self.prompt()

    def prompt(self) -> None:
        self.child.expect_exact(PROMPT)

    def say(self, line: str) -> None:
        self.child.sendline(line)

    def expect(self, text: str) -> str:
        """Wait for ``text``; return what came before it."""
        self.child.expect_exact(text)
        return str(self.child.before)

    def exit_code(self) -> int:
        self.child.expect(pexpect.EOF)
        self.child.close()
        assert self.child.exitstatus is not None, "killed by a signal"
        return self.child.exitstatus

    def close(self) -> None:
        if self.child.isalive():
            self.child.terminate(force=True)


@pytest.fixture
def terminal(stack: Stack) -> Iterator[Terminal]:
    opened = Terminal(stack)
    yield opened
    opened.close()


def _conversations(stack: Stack) -> list[dict[str, object]]:
    with stack.client() as http:
        items: list[dict[str, object]] = http.get("/agentik/conversations").json()["items"]
    return items


def _messages(stack: Stack, conversation_id: object) -> list[dict[str, object]]:
    with stack.client() as http:
        url = f"/agentik/conversations/{conversation_id}/messages"
        items: list[dict[str, object]] = http.get(url).json()["items"]
    return items


def test_a_turn_streams_the_answer_and_returns_to_the_prompt(terminal: Terminal) -> None:
    terminal.say("hello there")
    terminal.expect("Echo: hello there\r\n")
    terminal.prompt()
    terminal.say("/quit")
    assert terminal.exit_code() == 0


def test_tool_calls_and_results_are_shown_on_lines_of_their_own(terminal: Terminal) -> None:
    terminal.say('[[tool:current_time {"timezone": "UTC"}]] now')
    terminal.expect('\r\n→ current_time {"timezone": "UTC"}\r\n')
    terminal.expect('← current_time: {"timezone": "UTC"')
    terminal.expect("Result: {")
    terminal.prompt()


def test_list_new_and_switch_move_between_conversations(stack: Stack, terminal: Terminal) -> None:
    terminal.say("first conversation")
    terminal.expect("Echo: first conversation")
    terminal.prompt()
    first = _conversations(stack)[0]["id"]
    terminal.say("/new")
    terminal.expect("the next message starts a new conversation")
    terminal.prompt()
    terminal.say("second conversation")
    terminal.expect("Echo: second conversation")
    terminal.prompt()
    second = _conversations(stack)[0]["id"]
    assert second != first

    terminal.say("/list")
    terminal.expect(f"* {second}")
    terminal.expect(f"  {first}")
    terminal.prompt()
    terminal.say(f"/switch {str(first)[:12]}")
    terminal.expect(f"now in conversation {first}")
    terminal.prompt()
    terminal.say("again")
    terminal.expect("Echo: again")
    terminal.prompt()
    said = [m["content"] for m in _messages(stack, first) if m["role"] == "user"]
    assert said == [[{"type": "text", "text": t}] for t in ("first conversation", "again")]


def test_switch_alone_lists_the_conversations(stack: Stack, terminal: Terminal) -> None:
    terminal.say("listed")
    terminal.expect("Echo: listed")
    terminal.prompt()
    current = _conversations(stack)[0]["id"]

    terminal.say("/switch")

    terminal.expect(f"* {current}")
    terminal.expect("/switch ID (or a unique prefix of one) continues it")
    terminal.prompt()


def test_help_and_unknown_commands_answer_without_sending(terminal: Terminal) -> None:
    terminal.say("/help")
    terminal.expect("/switch ID")
    terminal.prompt()
    terminal.say("/frobnicate")
    terminal.expect("unknown command '/frobnicate'")
    terminal.prompt()


def test_conversation_continues_it_on_the_terminal(stack: Stack) -> None:
    with stack.client() as http:
        conversation_id = http.post("/agentik/conversations", json={}).json()["id"]
    opened = Terminal(stack, "--conversation", conversation_id)
    try:
        opened.say("more")
        opened.expect("Echo: more")
        opened.prompt()
    finally:
        opened.close()
    assert [m["role"] for m in _messages(stack, conversation_id)] == ["user", "assistant"]


def test_an_approval_is_asked_and_resume_runs_the_call(terminal: Terminal) -> None:
    terminal.say('[[tool:calculate {"expression": "2+2"}]]')
    terminal.expect('Approve calling calculate with {"expression": "2+2"}? [y/N/e(dit)] ')
    terminal.say("y")
    terminal.expect('← calculate: {"expression": "2+2", "result": 4}')
    terminal.expect('Result: {"expression": "2+2", "result": 4}')
    terminal.prompt()


def test_an_approval_can_be_edited_or_declined(terminal: Terminal) -> None:
    terminal.say('[[tool:calculate {"expression": "2+2"}]]')
    terminal.expect("[y/N/e(dit)] ")
    terminal.say("e")
    terminal.expect("arguments as JSON")
    terminal.say('{"expression": "6*7"}')
    terminal.expect('"result": 42}')
    terminal.prompt()

    terminal.say('[[tool:calculate {"expression": "1/0"}]]')
    terminal.expect("[y/N/e(dit)] ")
    terminal.say("n")
    terminal.expect("reason (optional)> ")
    terminal.say("not today")
    terminal.expect("← calculate: The user declined this call of calculate (declined: not today)")
    terminal.prompt()


def test_a_question_is_asked_and_the_answer_goes_back(terminal: Terminal) -> None:
    arguments = json.dumps({"question": "Your favourite colour?", "choices": ["teal", "red"]})
    terminal.say(f"[[tool:ask_user {arguments}]]")
    terminal.expect("Your favourite colour? (teal / red)")
    terminal.expect("answer> ")
    terminal.say("teal")
    terminal.expect("Result: ")
    terminal.expect("teal")
    terminal.prompt()


def test_ctrl_c_interrupts_a_long_turn_and_keeps_the_session(
    stack: Stack, terminal: Terminal
) -> None:
    terminal.say("[[chunks:2000]][[slow:0.01]]")
    terminal.expect("w5 ")
    terminal.child.sendintr()
    terminal.expect("[interrupted]")
    terminal.prompt()
    conversation_id = _conversations(stack)[0]["id"]
    [_, answer] = _messages(stack, conversation_id)
    assert answer["status"] == "interrupted"

    terminal.say("still here")
    terminal.expect("Echo: still here")
    terminal.prompt()


def test_a_second_ctrl_c_quits(stack: Stack, terminal: Terminal) -> None:
    terminal.say("[[chunks:2000]][[slow:0.01]]")
    terminal.expect("w5 ")
    terminal.child.sendintr()
    terminal.expect("Ctrl-C again quits")
    terminal.child.sendintr()
    assert terminal.exit_code() == EXIT_INTERRUPTED
    # The turn was interrupted all the same: the conversation is idle again.
    conversation_id = _conversations(stack)[0]["id"]

    def idle() -> bool:
        url = f"{stack.base_url}/agentik/conversations/{conversation_id}"
        return httpx.get(url, timeout=WAIT).json()["active_run_id"] is None

    wait_for(idle, "the interrupted turn to end")


def test_ctrl_c_at_the_prompt_quits(terminal: Terminal) -> None:
    terminal.child.sendintr()
    assert terminal.exit_code() == EXIT_INTERRUPTED


def test_ctrl_d_at_the_prompt_leaves(terminal: Terminal) -> None:
    terminal.child.sendeof()
    assert terminal.exit_code() == 0


def test_a_conversation_that_waits_asks_its_question_when_opened(stack: Stack) -> None:
    with stack.client() as http:
        conversation_id = http.post("/agentik/conversations", json={}).json()["id"]
        base = f"/agentik/conversations/{conversation_id}"
        with http.stream(
            "POST", f"{base}/send", json={"text": '[[tool:calculate {"expression": "3*3"}]]'}
        ) as paused:
            paused.read()
    opened = Terminal(stack, "--conversation", conversation_id, prompt=False)
    try:
        opened.expect("this conversation waits for you:")
        opened.expect('Approve calling calculate with {"expression": "3*3"}? [y/N/e(dit)] ')
        opened.say("y")
        opened.expect('"result": 9}')
        opened.prompt()
    finally:
        opened.close()


class _BrokenStream(BaseHTTPRequestHandler):
    """A facade whose turn breaks mid-answer: a frame that is not JSON after the first words."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        body = (
            b'event: append_text\ndata: {"message_id": "m1", "text": "half an"}\n\n'
            b"event: append_text\ndata: {not json\n\n"
        )
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


def test_a_turn_that_fails_mid_answer_ends_the_answers_line_before_the_error() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _BrokenStream)
    serving = threading.Thread(target=server.serve_forever, daemon=True)
    serving.start()
    text, aside = io.StringIO(), io.StringIO()
    client = AgentikClient(f"http://127.0.0.1:{server.server_address[1]}")
    try:
        session = ChatSession(client, Renderer(text, aside, color=False), "c1")
        with pytest.raises(ChatError, match="not JSON"):
            session.send("hi")
    finally:
        client.close()
        server.shutdown()
        serving.join(WAIT)
        server.server_close()
    # The caller prints the error next: it starts on a line of its own.
    assert text.getvalue() == "half an\n"
