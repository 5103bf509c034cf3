"""Refused requests with large bodies do not pile up in a web worker's memory (under
gunicorn, with the collector set for a server as ``agentik web`` sets it).

Errors of routing and of gRPC's interceptors sit in reference cycles with the frames they
were raised through, and those frames hold the request's body and what was parsed from it.
With the youngest generation collected every 10,000 new objects, many such bodies were alive
at once: 240 refused 900 KB requests grew a worker by 85 MiB, against 1-12 MiB once each
answered error lets go of its frames (``agentik.collector.release``)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator

import httpx
import pytest

from tests.fakes.fake_openai import FakeOpenAI
from tests.hostile.verdict import rss_bytes
from tests.stack import Stack

pytestmark = pytest.mark.processes

ROUNDS = 60
"""Each round sends one refused request of each kind."""
GROWTH = 32 << 20
"""How much the worker's resident memory may grow over all of them."""
BIG = "y" * 900_000


@pytest.fixture(scope="module")
def big_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with FakeOpenAI() as llm:
        running = Stack(
            llm,
            tmp_path_factory.mktemp("refused"),
            AGENTIK_WEB_WORKERS="1",
            AGENTIK_MAX_BODY_BYTES="2000000",
            AGENTIK_WEB_GC_THRESHOLD="10000",  # the default, whatever the test's environment
        )
        try:
            yield running
        finally:
            running.stop()


def _children(pid: int) -> list[int]:
    found = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True)
    return [int(p) for p in found.stdout.split()]


def _worker(stack: Stack) -> int:
    """The one web worker: the process under ``agentik web`` with no children."""
    leaves, pending = [], [stack.web.popen.pid]
    while pending:
        pid = pending.pop()
        children = _children(pid)
        pending += children
        if not children and pid != stack.web.popen.pid:
            leaves.append(pid)
    assert len(leaves) == 1, leaves
    return leaves[0]


def _refusals(http: httpx.Client, i: int) -> list[Callable[[], httpx.Response]]:
    tool_message = {"id": "m", "role": "tool", "content": BIG, "toolCallId": "nope"}
    return [
        # the engine refuses it (a title over its bound): 400 through the error handlers
        lambda: http.post("/agentik/conversations", json={"title": BIG}),
        # not JSON: the facade's own refusal
        lambda: http.post(
            "/agui", content=BIG.encode(), headers={"content-type": "application/json"}
        ),
        # no such route: routing's 404, the body never read
        lambda: http.post("/agentik/nowhere", json={"text": BIG}),
        # an AG-UI run the engine refuses (the thread's first run is still going, or ended)
        lambda: http.post(
            "/agui",
            json={
                "threadId": f"t{i}",
                "runId": "r",
                "messages": [tool_message],
                "tools": [],
                "context": [],
                "state": {},
                "forwardedProps": {},
            },
        ),
        # an A2A refusal the route maps itself (a JSON-RPC error)
        lambda: http.post(
            "/",
            json={
                "jsonrpc": "2.0",
                "id": 1,
                "method": "GetTask",
                "params": {"id": "no" + BIG[:64]},
            },
            headers={"A2A-Version": "1.0"},
        ),
    ]


def test_refused_large_requests_do_not_pile_up_in_the_worker(big_stack: Stack) -> None:
    worker = _worker(big_stack)
    with big_stack.client() as http:
        for warm in _refusals(http, -1):  # every path once, before the baseline
            warm()
        baseline = rss_bytes(worker)
        statuses: set[int] = set()
        for i in range(ROUNDS):
            for refuse in _refusals(http, i):
                response = refuse()
                statuses.add(response.status_code)
                assert response.status_code < 500, response.text
    grown = rss_bytes(worker) - baseline
    assert statuses >= {400, 404}, statuses
    assert grown < GROWTH, f"the worker grew by {grown >> 20} MiB"
