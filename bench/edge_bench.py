"""``/health`` and ``/metrics`` latency while slow and idle clients attack the facade's edge.

Starts the fake OpenAI server, the engine and the web facade (gunicorn, ``--workers`` x
``--threads``) as in the end-to-end tests, then probes ``GET /health`` (each probe on a new
connection, one after the other, the way a load balancer does):

1. **quiet**: nobody else is connected;
2. **attack**: ``--slow`` connections that sent part of a request head and stall (slowloris)
   and ``--streams`` connections that asked for an SSE stream and read nothing; probes start
   as soon as every attacker has sent its bytes, while the stream requests beyond the
   threads still wait for one.

Reported per phase: median, p99 and max of the probes, and of ``GET /metrics`` probes; for
the attack, how the stream requests were answered (streams opened, 503s) and how long the
last 503 took. Results: docs/performance.md ("The edge under slow and idle clients").

Run: ``python -m bench.edge_bench`` (defaults: 2 workers x 8 threads, 200 slow heads,
500 idle streams, 200 probes).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import httpx

from tests.fakes.fake_openai import FakeOpenAI
from tests.stack import Stack
from tests.web.edge_attacks import Crowd, partial_heads, probe, stream_requests

WAIT = 30.0


def _summary(seconds: Sequence[float]) -> dict[str, float]:
    ordered = sorted(seconds)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return {
        "median_ms": round(statistics.median(ordered) * 1000, 2),
        "p99_ms": round(p99 * 1000, 2),
        "max_ms": round(ordered[-1] * 1000, 2),
    }


def _probes(stack: Stack, path: str, count: int) -> dict[str, float]:
    seconds = []
    for _ in range(count):
        took, status, body = probe(stack.http_port, path, within=WAIT)
        assert status == 200, (path, status, body[:200])
        seconds.append(took)
    return _summary(seconds)


def _phase(stack: Stack, probes: int) -> dict[str, object]:
    return {
        "health": _probes(stack, "/health", probes),
        "metrics": _probes(stack, "/metrics", max(1, probes // 4)),
    }


def _attack(stack: Stack, options: argparse.Namespace) -> dict[str, object]:
    created = httpx.post(f"{stack.base_url}/agentik/conversations", json={}, timeout=WAIT)
    path = f"/agentik/conversations/{created.json()['id']}/events"
    slow = partial_heads(stack.http_port, options.slow)
    started = time.monotonic()
    crowd = Crowd(stream_requests(stack.http_port, path, options.streams))
    try:
        result = _phase(stack, options.probes)
        crowd.read(within=WAIT)
        result["streams"] = {
            "requested": options.streams,
            "streaming": len(crowd.with_status(200)),
            "refused_503": len(crowd.with_status(503)),
            "closed_unanswered": len(crowd.closed),
            "last_answer_s": round(time.monotonic() - started, 2),
        }
        return result
    finally:
        crowd.close()
        for sock in slow:
            sock.close()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--slow", type=int, default=200, help="slowloris connections")
    parser.add_argument("--streams", type=int, default=500, help="idle stream requests")
    parser.add_argument("--probes", type=int, default=200, help="/health probes per phase")
    parser.add_argument("--json", type=Path, help="also write the report here")
    options = parser.parse_args(argv)
    with FakeOpenAI() as llm, tempfile.TemporaryDirectory(prefix="edge-bench-") as logs:
        stack = Stack(
            llm,
            Path(logs),
            AGENTIK_WEB_WORKERS=str(options.workers),
            AGENTIK_WEB_THREADS=str(options.threads),
            AGENTIK_HEARTBEAT="15",
        )
        try:
            report = {
                "workers": options.workers,
                "threads": options.threads,
                "quiet": _phase(stack, options.probes),
                "attack": _attack(stack, options),
            }
        finally:
            stack.stop()
    text = json.dumps(report, indent=2)
    print(text)
    if options.json:
        options.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
