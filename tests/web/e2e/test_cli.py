"""``agentik serve`` and ``agentik web`` as a user runs them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.fakes.fake_openai import FakeOpenAI
from tests.web.e2e.conftest import GUNICORN_LISTENING, ROOT, WAIT, Process, free_port, wait_for


def _env(llm: FakeOpenAI, tmp_path: Path) -> dict[str, str]:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        # serve derives the facade's engine target from this, so it cannot be port 0.
        "AGENTIK_GRPC_ADDR": f"127.0.0.1:{free_port()}",
        "AGENTIK_HTTP_ADDR": "127.0.0.1:0",
        "AGENTIK_STORE": f"sqlite:///{tmp_path / 'agentik.db'}",
        "OPENAI_BASE_URL": llm.base_url,
        "OPENAI_API_KEY": "test-key",
        "AGENTIK_WEB_WORKERS": "1",
        "AGENTIK_WEB_THREADS": "4",
        "AGENTIK_LOG_LEVEL": "INFO",
    }
    env.pop("AGENTIK_CONFIG", None)
    return env


def _healthy(base: str) -> bool:
    try:
        return httpx.get(f"{base}/health", timeout=2.0).status_code == 200
    except httpx.TransportError:
        return False


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_serve_runs_engine_and_web_together_and_stops_both_on_a_signal(
    tmp_path: Path, sig: int
) -> None:
    with FakeOpenAI() as llm:
        argv = [sys.executable, "-m", "engine_service.cli", "serve"]
        serve = Process("serve", argv, _env(llm, tmp_path), tmp_path)
        try:
            base = f"http://127.0.0.1:{serve.wait_for_log(GUNICORN_LISTENING)}"
            wait_for(lambda: _healthy(base), "serve to be healthy")
            created = httpx.post(f"{base}/agentik/conversations", json={"title": "s"}, timeout=WAIT)
            assert created.status_code == 201
        finally:
            code = serve.stop(sig)
    assert code == 0, serve.log()
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{base}/health", timeout=2.0)


def test_web_refuses_a_bad_setting_with_a_message_that_names_it(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "AGENTIK_WEB_THREADS": "many"}
    env.pop("AGENTIK_CONFIG", None)
    done = subprocess.run(
        [sys.executable, "-m", "engine_service.cli", "web"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        timeout=WAIT,
    )
    assert done.returncode == 2
    assert b"AGENTIK_WEB_THREADS" in done.stderr
