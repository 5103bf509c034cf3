"""The chat page in a real headless browser (Debian's chromium, driven by selenium) against
the whole stack: engine process, gunicorn, the page at ``GET /`` and the ``/agentik`` API.

Two stacks: the offline model with ``calculate`` under approval and ``ask_user`` offered (the
human-in-the-loop flows), and the fake LLM, whose ``[[chunks:N]][[slow:S]]`` directives make a
long, slow answer to reload or stop in the middle of.

Model output is Markdown; the hostile answers come from the fake LLM's scripted replies.

Set ``AGENTIK_SCREENSHOT_DIR`` to save the screenshots that docs/chat.md shows.
"""

from __future__ import annotations

import os
import re
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver import ActionChains, Chrome, ChromeOptions
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.wait import WebDriverWait

from tests.browser import chromium_or_skip
from tests.fakes.a2a_sdk_agent_process import SdkAgent
from tests.fakes.fake_openai import FakeOpenAI, FakeReply
from tests.web.e2e.conftest import ENGINE_LISTENING, WAIT, Process, Stack, free_port

pytestmark = pytest.mark.timeout(300)

TOKEN = "page-token-of-alice-0123456789"


@pytest.fixture(scope="module")
def browser() -> Iterator[Chrome]:
    chromium, chromedriver = chromium_or_skip()
    options = ChromeOptions()
    options.binary_location = chromium
    for argument in (
        "--headless=new",
        "--no-sandbox",  # tests run as root in CI
        "--disable-dev-shm-usage",
        "--window-size=1100,760",
        "--no-first-run",
        "--disable-extensions",
    ):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = Chrome(options=options, service=Service(executable_path=chromedriver))
    driver.set_page_load_timeout(WAIT)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def offline_stack(llm: FakeOpenAI, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    running = Stack(
        llm,
        tmp_path_factory.mktemp("page-offline"),
        OPENAI_BASE_URL="",  # the offline model
        OPENAI_API_KEY="",
        AGENTIK_TOOLS_APPROVAL="calculate",
        AGENTIK_TOOLS_ASK_USER="true",
    )
    yield running
    running.stop()


@pytest.fixture(scope="module")
def slow_stack(llm: FakeOpenAI, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    running = Stack(llm, tmp_path_factory.mktemp("page-slow"), AGENTIK_TOKENS=f"alice:{TOKEN}")
    yield running
    running.stop()


class Page:
    """The chat page in the browser, with bounded waits."""

    def __init__(self, driver: Chrome, base_url: str) -> None:
        self.driver = driver
        self.base_url = base_url

    def open(self) -> None:
        self.driver.get(f"{self.base_url}/")
        self.driver.execute_script("sessionStorage.clear()")
        self.driver.get(f"{self.base_url}/")
        self.wait(lambda: self.driver.execute_script("return document.readyState") == "complete")

    def wait(self, condition: Callable[[], Any], what: str = "the page") -> Any:
        def check(_: Chrome) -> Any:
            try:
                return condition()
            except StaleElementReferenceException:
                return False

        message = f"timed out waiting for {what}; status: {self.status()!r}"
        return WebDriverWait(self.driver, WAIT).until(check, message)

    def find(self, css: str) -> list[WebElement]:
        return list(self.driver.find_elements(By.CSS_SELECTOR, css))

    def one(self, css: str) -> WebElement:
        """The last element ``css`` selects, once there is one."""

        def last() -> WebElement | None:
            found = self.find(css)
            return found[-1] if found else None

        element: WebElement = self.wait(last, css)
        return element

    def click(self, css: str) -> None:
        """Click the last element ``css`` selects (found again if the page redrew it)."""

        def clicked() -> bool:
            self.one(css).click()
            return True

        self.wait(clicked, css)

    def status(self) -> str:
        found = self.driver.find_elements(By.ID, "status")
        return found[0].text if found else ""

    def send(self, text: str) -> None:
        box = self.one("#input")
        self.wait(lambda: box.is_enabled() and self.one("#send").is_enabled(), "the send button")
        box.send_keys(text)
        self.one("#send").click()

    def answers(self) -> list[str]:
        return [e.text for e in self.find(".msg.assistant > .text")]

    def wait_for_answer(self, pattern: str) -> str:
        regex = re.compile(pattern)
        found = self.wait(
            lambda: next((a for a in self.answers() if regex.search(a)), None),
            f"an answer matching {pattern!r} (answers: {self.answers()})",
        )
        return str(found)

    def idle(self) -> None:
        self.wait(lambda: not self.one("#stop").is_displayed(), "the turn to end")

    def current_id(self) -> str:
        return str(self.driver.current_url.rsplit("#", 1)[1])

    def input_value(self) -> str:
        return str(self.one("#input").get_attribute("value"))

    def titles(self) -> list[str]:
        return [e.text for e in self.find("#conversations li .title")]

    def conversation_ids(self) -> list[str]:
        return [str(e.get_attribute("data-id")) for e in self.find("#conversations li")]

    def screenshot(self, name: str) -> None:
        directory = os.environ.get("AGENTIK_SCREENSHOT_DIR")
        if directory:
            Path(directory).mkdir(parents=True, exist_ok=True)
            self.driver.save_screenshot(str(Path(directory) / name))

    def assert_no_console_errors(self, expected: str = "") -> None:
        """CSP violations and script errors show up in the console as SEVERE.

        ``expected``: a pattern of the errors the test caused on purpose (a refused request).
        """
        logs: list[dict[str, Any]] = self.driver.get_log("browser")  # type: ignore[no-untyped-call]
        severe = [entry["message"] for entry in logs if entry["level"] == "SEVERE"]
        if expected:
            severe = [message for message in severe if not re.search(expected, message)]
        assert severe == [], severe


@pytest.fixture(scope="module")
def page(browser: Chrome, offline_stack: Stack) -> Page:
    opened = Page(browser, offline_stack.base_url)
    opened.open()
    return opened


def test_hello_streams_an_answer_into_a_new_conversation(page: Page) -> None:
    page.send("hello")
    page.wait_for_answer(r'^You said: "hello"\. \(offline model')
    page.idle()
    assert page.find(".msg.user")[0].text == "hello"
    page.wait(lambda: page.titles() == ["hello"], "the title")
    assert page.one("#conversations li .date").text  # when it last changed
    assert not page.one("#token-form").is_displayed()  # this server needs no token
    page.assert_no_console_errors()


def test_reasoning_is_shown_collapsed_before_the_answer(page: Page) -> None:
    page.send("think about it")
    page.wait_for_answer(r'^You said: "think about it"')
    page.idle()
    reasoning = page.one("details.reasoning")
    assert reasoning.get_attribute("open") is None
    assert page.one("details.reasoning > summary").text == "Reasoning"
    reasoning.find_element(By.TAG_NAME, "summary").click()
    page.wait(lambda: "asked me to think" in reasoning.text, "the reasoning text")


def test_an_approved_calculation_shows_the_tool_call_and_its_result(page: Page) -> None:
    page.send("calculate 2+2")
    approve = page.one(".prompt button.approve")
    assert '"expression": "2+2"' in page.one(".prompt pre.args").text
    page.screenshot("chat-approval.png")
    approve.click()
    page.wait_for_answer(r"^2\+2 = 4\.$")
    page.idle()
    call = page.one(".tool-call")
    assert "Tool call: calculate" in call.text
    assert '"result": 4' in page.one(".tool-call .result").text
    assert re.fullmatch(r"· \d+(\.\d)? m?s", page.one(".tool-call .timing").text)
    assert not page.find(".prompt")
    page.screenshot("chat-tool-call.png")


def test_edited_arguments_run_instead_of_the_llms(page: Page) -> None:
    page.send("calculate 2+2")
    page.one(".prompt button.edit").click()
    editor = page.one(".prompt textarea.edit-arguments")
    editor.clear()
    editor.send_keys('{"expression": "6*7"}')
    page.one(".prompt button.approve").click()
    page.wait_for_answer(r"^6\*7 = 42\.$")
    page.idle()


def test_a_declined_call_is_read_by_the_agent(page: Page) -> None:
    page.send("calculate 3+3")
    page.one(".prompt input.reason").send_keys("not now")
    page.one(".prompt button.decline").click()
    page.wait_for_answer(r"declined")
    page.idle()
    assert not any("3+3 = 6" in answer for answer in page.answers())


def test_a_question_is_answered_in_the_page(page: Page) -> None:
    page.send("ask me your favourite colour")
    page.one(".prompt .question")
    page.idle()
    page.driver.refresh()  # the question waits in the conversation, not in the page
    question = page.one(".prompt .question")
    assert "colour" in question.text.lower()
    page.one(".prompt input.answer").send_keys("teal")
    page.one(".prompt button.send-answer").click()
    page.wait_for_answer(r'You answered: "teal"')
    page.idle()
    page.assert_no_console_errors()


def test_conversations_are_created_switched_and_deleted(page: Page) -> None:
    [first] = page.conversation_ids()
    page.one("#new-conversation").click()
    page.wait(lambda: not page.find("#log > *"), "an empty log")
    assert page.conversation_ids() == [first]  # nothing stored before the first message
    page.send("hello again")
    page.wait_for_answer(r'You said: "hello again"')
    page.idle()
    second = page.current_id()
    assert second != first and set(page.conversation_ids()) == {first, second}

    page.click(f'#conversations li[data-id="{first}"] .open')
    page.wait_for_answer(r"^2\+2 = 4\.$")  # the history, tool calls and all
    results = [e.text for e in page.find(".tool-call .result")]
    assert any('"result": 4' in result for result in results), results
    assert not any("hello again" in answer for answer in page.answers())

    page.click(f'#conversations li[data-id="{second}"] .delete')
    page.wait(lambda: page.conversation_ids() == [first], "the deleted conversation to go")
    page.wait_for_answer(r"^2\+2 = 4\.$")  # the open one stays
    page.assert_no_console_errors()


def test_edit_and_resend_forks_before_the_message_and_sends_the_edited_text(
    page: Page,
) -> None:
    page.one("#new-conversation").click()
    page.wait(lambda: not page.find("#log > *"), "an empty log")
    page.send("first words")
    page.wait_for_answer(r'You said: "first words"')
    page.idle()
    page.send("second words")
    page.wait_for_answer(r'You said: "second words"')
    page.idle()
    original = page.current_id()

    page.click(".msg.user .edit")  # the last one
    box = page.one(".edit-box textarea")
    assert box.get_attribute("value") == "second words"
    box.clear()
    box.send_keys("second words, edited")
    page.click(".edit-box .resend")
    page.wait(lambda: page.current_id() != original, "the copy to open")
    page.wait_for_answer(r'You said: "second words, edited"')
    page.idle()
    copy = page.current_id()
    assert [e.text for e in page.find(".msg.user")] == ["first words", "second words, edited"]
    assert not any('second words"' in answer for answer in page.answers())
    assert {original, copy} <= set(page.conversation_ids())

    page.click(f'#conversations li[data-id="{original}"] .open')  # left as it was
    page.wait(
        lambda: [e.text for e in page.find(".msg.user")] == ["first words", "second words"],
        "the original's messages",
    )
    # The first message has nothing before it: its edit starts a new conversation.
    page.find(".msg.user .edit")[0].click()
    box = page.one(".edit-box textarea")
    box.clear()
    box.send_keys("a fresh start")
    page.click(".edit-box .resend")
    page.wait_for_answer(r'You said: "a fresh start"')
    page.idle()
    assert page.current_id() not in (original, copy)
    assert [e.text for e in page.find(".msg.user")] == ["a fresh start"]
    page.assert_no_console_errors()


def test_a_refused_send_keeps_the_message_and_says_why(page: Page) -> None:
    page.send("calculate 5+5")
    page.one(".prompt button.approve")
    page.idle()
    page.send("hello while it waits")  # refused: 409 input_required
    page.wait(lambda: "waits for your answer" in page.status(), "the reason")
    assert page.input_value() == "hello while it waits"
    assert "hello while it waits" not in [e.text for e in page.find(".msg.user")]
    page.screenshot("chat-refused-send.png")
    page.one(".prompt button.approve").click()
    page.wait_for_answer(r"^5\+5 = 10\.$")
    page.idle()
    assert page.input_value() == "hello while it waits"  # still there to send
    page.one("#send").click()
    page.wait_for_answer(r'^You said: "hello while it waits"')
    page.idle()
    assert page.input_value() == ""
    assert "waits for your answer" not in page.status()
    page.assert_no_console_errors(expected=r"/send - .* status of 409 \(CONFLICT\)")


def test_conversations_are_renamed_searched_and_titled_by_their_first_message(
    page: Page, offline_stack: Stack
) -> None:
    with offline_stack.client() as http:
        made = http.post("/agentik/conversations", json={}).json()  # untitled, like the CLI's
        with http.stream(
            "POST", f"/agentik/conversations/{made['id']}/send", json={"text": "made elsewhere"}
        ) as sent:
            sent.read()
        page.driver.get(f"{page.base_url}/#{made['id']}")
        page.wait(lambda: "made elsewhere" in page.titles(), "a title from the first message")
        assert http.get(f"/agentik/conversations/{made['id']}").json()["title"] == "made elsewhere"

        page.click(f'#conversations li[data-id="{made["id"]}"] .rename')
        editor = page.one("#conversations .rename-title")
        assert editor.get_attribute("value") == "made elsewhere"
        editor.send_keys("Renamed in the page\n")  # the old title is selected: typing replaces it
        page.wait(lambda: "Renamed in the page" in page.titles(), "the new title")
        stored = http.get(f"/agentik/conversations/{made['id']}").json()
        assert stored["title"] == "Renamed in the page"

    others = len(page.titles()) - 1
    assert others >= 1
    page.one("#search").send_keys("RENAMED")

    def visible() -> list[str]:
        return [e.text for e in page.find("#conversations li .title") if e.is_displayed()]

    page.wait(lambda: visible() == ["Renamed in the page"], "the search to filter")
    page.one("#search").clear()
    page.one("#search").send_keys(" ")
    page.wait(lambda: len(visible()) == others + 1, "every conversation again")
    page.assert_no_console_errors()


def test_at_phone_width_the_sidebar_folds_away_and_comes_back(page: Page) -> None:
    driver = page.driver
    driver.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": 390, "height": 844, "deviceScaleFactor": 2, "mobile": True},
    )
    try:
        driver.refresh()
        page.wait(lambda: page.find(".msg.user"), "the history")
        sidebar = page.one("#sidebar")
        assert not sidebar.is_displayed()
        box = page.one("#input")
        assert box.size["width"] >= 250, box.size  # the composer keeps the width
        assert driver.execute_script("return document.documentElement.scrollWidth") <= 390
        page.screenshot("chat-phone.png")

        page.one("#menu").click()
        page.wait(sidebar.is_displayed, "the sidebar")
        assert sidebar.size["width"] <= 340
        page.screenshot("chat-phone-sidebar.png")
        page.click("#conversations li .open")  # opening a conversation folds the sidebar again
        page.wait(lambda: not sidebar.is_displayed(), "the sidebar to fold")
        page.one("#menu").click()
        page.wait(sidebar.is_displayed, "the sidebar")
        log = page.one("#log")  # a tap beside it folds it too
        ActionChains(driver).move_to_element_with_offset(
            log, log.size["width"] // 2 - 10, 0
        ).click().perform()
        page.wait(lambda: not sidebar.is_displayed(), "the sidebar to fold")
        page.send("hello from a phone")
        page.wait_for_answer(r'You said: "hello from a phone"')
        page.idle()
    finally:
        driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
        driver.refresh()
    page.wait(lambda: page.one("#sidebar").is_displayed(), "the sidebar at desktop width")
    page.assert_no_console_errors()


@pytest.fixture(scope="module")
def slow_tab(browser: Chrome, slow_stack: Stack) -> Page:
    opened = Page(browser, slow_stack.base_url)
    opened.open()
    return opened


def _stored_token(page: Page) -> object:
    return page.driver.execute_script("return sessionStorage.getItem('agentik.token')")


def _sign_in(page: Page) -> None:
    page.one("#token").send_keys(TOKEN)
    page.one("#token-form button").click()
    page.wait(lambda: not page.one("#token-form").is_displayed(), "the form to go")


@pytest.fixture
def slow_page(slow_tab: Page) -> Page:
    """The slow stack's page, signed in: each test runs alone as well as after the others."""
    page = slow_tab
    page.wait(
        lambda: page.one("#token-form").is_displayed() or _stored_token(page) == TOKEN,
        "the token form or a stored token",
    )
    if _stored_token(page) != TOKEN:
        _sign_in(page)
        page.driver.get_log("browser")  # type: ignore[no-untyped-call]  # the expected 401
    return page


def test_a_server_with_tokens_asks_for_one_and_the_page_sends_it(slow_tab: Page) -> None:
    page = slow_tab
    if _stored_token(page) is not None:  # signed in by a test before: start again
        page.driver.execute_script("sessionStorage.removeItem('agentik.token')")
        page.driver.refresh()
    page.wait(lambda: page.one("#token-form").is_displayed(), "the token form")
    assert "token" in page.status().lower()
    _sign_in(page)
    page.send("[[chunks:2]] hi")
    page.wait_for_answer(r"^w0 w1\s*$")
    page.idle()
    assert _stored_token(page) == TOKEN
    page.driver.get_log("browser")  # type: ignore[no-untyped-call]  # the expected 401


HOSTILE = """Here is **bold**, `inline code` and a [safe link](https://example.com/docs).

<script>window.__pwned = "script"</script>
<img src=x onerror="window.__pwned = 'onerror'">

A [bad link](javascript:window.__pwned='link') and <a href="javascript:void 0">raw</a>.

```python
def greet(name):
    return "hi " + name  # a comment
```

| tool | calls |
|------|------:|
| calculate | 2 |
"""


def test_markdown_is_rendered_and_hostile_answers_never_run(
    slow_page: Page, llm: FakeOpenAI
) -> None:
    page = slow_page
    llm.enqueue(FakeReply(text=HOSTILE))
    page.send("show me some markdown")
    page.wait(lambda: page.find(".msg.assistant .text table"), "the table")
    page.idle()
    bubble = page.find(".msg.assistant")[-1]

    def inside(css: str) -> list[WebElement]:
        return list(bubble.find_elements(By.CSS_SELECTOR, css))

    assert [e.text for e in inside("strong")] == ["bold"]
    assert [e.text for e in inside(":not(pre) > code")] == ["inline code"]
    assert [e.text for e in inside("td")] == ["calculate", "2"]
    keywords = [e.text for e in inside(".code pre code .tok-keyword")]
    assert keywords == ["def", "return"], keywords
    assert [e.text for e in inside(".tok-string")] == ['"hi "']
    assert [e.text for e in inside(".tok-comment")] == ["# a comment"]
    assert inside(".code .code-bar span")[0].text == "python"

    # Nothing the model wrote runs: raw HTML shows as text, bad links lose their target.
    assert "<script>" in bubble.text and "onerror" in bubble.text
    assert page.find("#log script, #log img, #log [onerror], #log iframe") == []
    links = inside("a")
    hrefs = [a.get_attribute("href") for a in links]
    assert hrefs == ["https://example.com/docs", None], hrefs
    assert 'href="javascript:void 0"' in bubble.text  # raw HTML shows as text
    assert links[0].get_attribute("target") == "_blank"
    assert links[0].get_attribute("rel") == "noopener noreferrer"
    links[1].click()
    assert page.driver.execute_script("return window.__pwned") is None
    page.screenshot("chat-markdown.png")

    copy = inside(".code .copy")[0]
    copy.click()
    page.wait(lambda: copy.text == "Copied", "the copy button to answer")

    page.driver.refresh()  # the same from the stored history
    page.wait(lambda: page.find(".msg.assistant .text table"), "the table after a reload")
    assert page.find("#log script, #log img, #log [onerror]") == []
    assert page.driver.execute_script("return window.__pwned") is None
    page.assert_no_console_errors()


def test_each_turn_shows_its_time_to_first_token_duration_and_tokens(slow_page: Page) -> None:
    page = slow_page
    page.send("[[chunks:3]][[slow:0.05]] count")
    page.wait_for_answer(r"^w0 w1 w2\s*$")
    page.idle()
    usage = page.wait(lambda: page.find(".turn-usage")[-1].text, "the turn's usage")
    assert re.fullmatch(
        r"first token \d+(\.\d)? m?s · took \d+(\.\d)? m?s · \d+ tokens \(\d+ in, 3 out\)", usage
    ), usage


def test_an_open_conversation_follows_a_turn_sent_by_another_client(
    slow_page: Page, slow_stack: Stack
) -> None:
    page = slow_page
    page.send("[[chunks:1]] first")
    page.wait_for_answer(r"^w0\s*$")
    page.idle()
    conversation = page.current_id()
    auth = {"Authorization": f"Bearer {TOKEN}"}
    with slow_stack.client() as other:
        path = f"/agentik/conversations/{conversation}/send"
        # Long enough (6 s) that the page's waits (polled every 0.5 s) and the racing send
        # all happen while the turn is still answering, on a loaded box too.
        body = {"text": "[[chunks:30]][[slow:0.2]] from another client"}
        with other.stream("POST", path, json=body, headers=auth) as sent:
            assert sent.status_code == 200
            # The page shows the other client's message and streams its answer as it comes.
            page.wait(
                lambda: "from another client" in [e.text for e in page.find(".msg.user")][-1],
                "the other client's message",
            )
            page.wait(lambda: page.one("#stop").is_displayed(), "the turn in flight")
            page.wait_for_answer(r"^w0 w1 w2\b")
            page.screenshot("chat-live-follow.png")
            assert not page.one("#send").is_enabled()
            # A send that races the other client's turn is refused 409 busy: the text stays.
            page.driver.execute_script("document.getElementById('send').disabled = false")
            page.one("#input").send_keys("too early")
            page.one("#send").click()
            page.wait(lambda: "still answering" in page.status(), "the refusal")
            assert page.input_value() == "too early"
            sent.read()
    answer = page.wait_for_answer(r"\bw29\b")
    assert answer.split() == [f"w{i}" for i in range(30)]  # each delta once
    page.idle()
    assert [e.text for e in page.find(".msg.user")].count(body["text"]) == 1
    assert "still answering" in page.status()  # the reason stays until the next send
    page.one("#send").click()
    page.wait_for_answer(r"^Echo: too early")
    page.idle()
    assert page.input_value() == ""
    page.assert_no_console_errors(expected=r"/send - .* status of 409 \(CONFLICT\)")


def test_the_live_follow_comes_back_after_the_facade_restarts(
    slow_page: Page, slow_stack: Stack
) -> None:
    page = slow_page
    conversation = page.current_id()
    slow_stack.web.stop()
    slow_stack.start_web()
    asked = "[[chunks:4]] after the restart"
    with slow_stack.client() as other:
        path = f"/agentik/conversations/{conversation}/send"
        auth = {"Authorization": f"Bearer {TOKEN}"}
        with other.stream("POST", path, json={"text": asked}, headers=auth) as sent:
            assert sent.status_code == 200
            sent.read()
    page.wait(lambda: page.find(".msg.user")[-1].text == asked, "the message after the restart")
    page.wait_for_answer(r"^w0 w1 w2 w3\s*$")
    page.idle()
    page.driver.get_log("browser")  # type: ignore[no-untyped-call]  # refused while it was down


def test_a_failed_turn_shows_its_error_after_a_reload_with_a_retry(
    slow_page: Page, llm: FakeOpenAI
) -> None:
    page = slow_page
    page.one("#new-conversation").click()
    page.wait(lambda: not page.find("#log > *"), "an empty log")
    llm.enqueue(FakeReply(status=503, error_message="the fake LLM is down"))
    page.send("this one fails first")
    error = page.one(".turn-error")
    said = error.text
    assert said.startswith("Error: ") and "Retry" in said, said
    page.idle()
    page.driver.refresh()
    page.wait(lambda: page.find(".msg.user"), "the history")
    error = page.one(".turn-error")
    assert error.text == said  # the same error, read back from the conversation's events
    page.screenshot("chat-failed-turn.png")
    error.find_element(By.CSS_SELECTOR, "button.retry").click()
    page.wait_for_answer(r"^Echo: this one fails first")
    page.idle()
    assert [e.text for e in page.find(".msg.user")] == ["this one fails first"] * 2
    assert len(page.find(".turn-error")) == 1
    page.driver.get_log("browser")  # type: ignore[no-untyped-call]


def test_a_reload_mid_stream_shows_the_whole_answer_once(slow_page: Page) -> None:
    page = slow_page
    asked = "[[chunks:60]][[slow:0.08]] a long answer"
    page.send(asked)
    page.wait_for_answer(r"\bw3\b")
    assert page.one("#stop").is_displayed()
    page.driver.refresh()
    page.wait(lambda: page.find(".msg.user"), "the history after the reload")
    # Still streaming into the reloaded page: the turn has seconds to go.
    page.wait(lambda: page.one("#stop").is_displayed(), "the stop button after the reload")
    answer = page.wait_for_answer(r"\bw59\b")
    assert answer.split() == [f"w{i}" for i in range(60)]
    page.idle()
    users = [e.text for e in page.find(".msg.user")]
    assert users[-1] == asked and users.count(asked) == 1, users


def test_stop_interrupts_the_turn_in_flight(slow_page: Page) -> None:
    page = slow_page
    page.one("#new-conversation").click()
    page.wait(lambda: not page.find("#log > *"), "an empty log")
    page.send("[[chunks:400]][[slow:0.05]] go on and on")
    page.wait(lambda: len(page.answers()) == 1 and "w2" in page.answers()[0], "streaming")
    page.one("#stop").click()
    page.one(".msg.assistant.interrupted")
    page.wait(lambda: any(e.text == "Stopped." for e in page.find(".note")), "the note")
    page.idle()
    words = page.answers()[-1].split()
    assert 3 <= len(words) < 400
    page.send("[[chunks:2]] again")  # the conversation takes messages again
    page.wait_for_answer(r"^w0 w1\s*$")
    page.assert_no_console_errors()


@pytest.fixture(scope="module")
def remote_agent() -> Iterator[SdkAgent]:
    with SdkAgent() as running:
        yield running


@pytest.fixture(scope="module")
def agents_stack(
    llm: FakeOpenAI, remote_agent: SdkAgent, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    running = Stack(
        llm,
        tmp_path_factory.mktemp("page-agents"),
        AGENTIK_A2A_AGENTS=f"helper={remote_agent.url}/",
    )
    running.engine.wait_for_log(re.compile(r"A2A agent 'helper' (ready)"))
    yield running
    running.stop()


def test_a_remote_agents_progress_shows_in_its_tool_call_until_its_result(
    browser: Chrome, agents_stack: Stack
) -> None:
    page = Page(browser, agents_stack.base_url)
    page.open()
    page.send('[[tool:helper {"message": "slow work"}]]')
    # The a2a-sdk agent says "working slowly", then works until it is cancelled.
    progress = page.wait(
        lambda: next((e for e in page.find(".tool-call .result.progress") if e.text), None),
        "the remote agent's progress in its tool call",
    )
    assert progress.text == "… working slowly"
    page.screenshot("chat-remote-agent.png")
    page.one("#stop").click()
    page.wait(lambda: any(e.text == "Stopped." for e in page.find(".note")), "the note")
    page.idle()
    result = page.one(".tool-call .result")
    page.wait(lambda: "progress" not in (result.get_attribute("class") or ""), "the result")
    assert result.text == "→ error: interrupted before the tool finished"
    page.assert_no_console_errors()


@pytest.fixture(scope="module")
def small_window_stack(
    llm: FakeOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    running = Stack(llm, tmp_path_factory.mktemp("page-window"), AGENTIK_CONTEXT_TOKENS="1500")
    yield running
    running.stop()


def test_earlier_messages_summarised_show_as_a_note_that_opens_to_the_summary(
    browser: Chrome, small_window_stack: Stack
) -> None:
    """A 1,500-token window fills in a few turns: the page says the earlier messages were
    summarised for the model, and the note opens to the summary (docs/conversations.md)."""
    page = Page(browser, small_window_stack.base_url)
    page.open()
    for index in range(6):
        page.send(f"turn {index} " + "tell me more " * 60)
        page.wait_for_answer(rf"^Echo: turn {index} ")
        page.idle()
        if page.find("details.compacted"):
            break
    note = page.one("details.compacted")
    assert re.fullmatch(r"Earlier messages summarised for the model \(\d+ messages\)", note.text)
    note.find_element(By.TAG_NAME, "summary").click()
    page.wait(lambda: "Summary: the user and the assistant talked" in note.text, "the summary")
    assert len(page.find(".msg.user")) == index + 1  # the page still shows every message
    page.assert_no_console_errors()


@pytest.fixture(scope="module")
def crashing_stack(llm: FakeOpenAI, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    logs = tmp_path_factory.mktemp("page-crash")
    # SQLite and a fixed engine port: the engine started again finds the run and the
    # facade finds the engine where the killed one was.
    running = Stack(
        llm,
        logs,
        AGENTIK_STORE=f"sqlite:///{logs / 'store.db'}",
        AGENTIK_GRPC_ADDR=f"127.0.0.1:{free_port()}",
    )
    yield running
    running.stop()


def test_an_answer_cut_by_an_engine_crash_is_replaced_by_the_resumed_one(
    browser: Chrome, crashing_stack: Stack
) -> None:
    """kill -9 of the engine mid-answer: the engine started again resumes the run, and the
    page drops the cut text on ``retry`` and shows the new answer alone, with a note."""
    chunks = 150
    page = Page(browser, crashing_stack.base_url)
    page.open()
    page.send(f"[[slow:0.03]] [[chunks:{chunks}]]")
    page.wait(lambda: any(a.startswith("w0 w1 w2") for a in page.answers()), "the answer")
    crashing_stack.engine.stop(signal.SIGKILL)
    crashing_stack.engine = Process(
        "engine", [sys.executable, "-m", "engine_service"], crashing_stack.env, crashing_stack.logs
    )
    crashing_stack.engine.wait_for_log(ENGINE_LISTENING)
    note = page.one(".note.retried")
    assert note.text == "The answer was cut; asking again."
    whole = " ".join(f"w{i}" for i in range(chunks))
    page.wait(lambda: page.answers() == [whole], f"the whole answer alone ({page.answers()})")
    page.idle()
    page.assert_no_console_errors()
