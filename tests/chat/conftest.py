"""``agentik chat`` against the whole stack (engine, gunicorn, the fake LLM), run as a user
runs it: a subprocess, piped or on a pseudo-terminal."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes.fake_openai import FakeOpenAI
from tests.web.e2e.conftest import ROOT, WAIT, Stack

# The stack's fixtures: the fake LLM for the module.
from tests.web.e2e.conftest import llm as llm

CHAT = [sys.executable, "-m", "agentik.cli", "chat"]


def chat_env(**extra: str) -> dict[str, str]:
    """The environment of a user's shell, without a token unless given."""
    env = {k: v for k, v in os.environ.items() if k not in ("AGENTIK_TOKEN", "AGENTIK_CONFIG")}
    return {**env, "PYTHONPATH": str(ROOT), "TERM": "dumb", **extra}


def run_chat(
    stdin: str, *args: str, timeout: float = WAIT, **env: str
) -> subprocess.CompletedProcess[str]:
    """``echo STDIN | agentik chat ARGS`` and what it printed."""
    return subprocess.run(
        [*CHAT, *args],
        input=stdin,
        env=chat_env(**env),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(autouse=True)
def state_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test's own ``$XDG_STATE_HOME`` (where ``--continue`` finds the last conversation):
    never the user's, never shared between tests."""
    home = tmp_path / "state"
    monkeypatch.setenv("XDG_STATE_HOME", str(home))
    return home


@pytest.fixture(scope="module")
def stack(llm: FakeOpenAI, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """The fake LLM's echo; ``calculate`` needs approval and ``ask_user`` is offered."""
    running = Stack(
        llm,
        tmp_path_factory.mktemp("chat"),
        AGENTIK_TOOLS_APPROVAL="calculate",
        AGENTIK_TOOLS_ASK_USER="true",
    )
    yield running
    running.stop()
