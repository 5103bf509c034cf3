"""``agentik --version``."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import version

from tests.web.e2e.conftest import ROOT, WAIT


def test_version_prints_the_installed_version_and_exits_0() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "agentik.cli", "--version"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=WAIT,
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, f"agentik {version('agentik')}\n", "")


def test_the_package_version_constant_is_the_installed_version() -> None:
    # The engine names itself with it (the LLM's User-Agent, MCP client info) without
    # loading importlib.metadata, which costs about 2 MiB of idle memory.
    # The A2A card's default version too (agentik/a2a/card.py), in the engine and the facade.
    import agentik
    import engine_service

    assert engine_service.__version__ == agentik.__version__ == version("agentik")


def test_an_engine_with_an_llm_endpoint_loads_neither_importlib_metadata_nor_urllib() -> None:
    script = (
        "import sys\n"
        "from engine_service.build import build_engine\n"
        "from agentik.config import load_settings\n"
        "env = {'AGENTIK_STORE': 'memory://', 'OPENAI_BASE_URL': 'http://127.0.0.1:9/v1'}\n"
        "build_engine(load_settings(env=env))\n"
        "print(sorted(m for m in ('importlib.metadata', 'urllib.request', 'email')"
        " if m in sys.modules))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=WAIT,
    )
    assert (done.returncode, done.stdout) == (0, "[]\n"), done.stderr
