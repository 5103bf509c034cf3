"""Building the engine from the settings (``engine_service.build``): the start-up warnings
for tool globs and approvals that match no tool (issue 23)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from agentik.config import load_settings
from engine_service.build import build_engine, warn_unmatched


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "agentik.toml"
    path.write_text(text)
    return path


def test_a_misspelt_approval_is_a_start_up_warning(caplog: pytest.LogCaptureFixture) -> None:
    settings = load_settings(None, {"AGENTIK_TOOLS_APPROVAL": "calcualte,calculate"})
    with caplog.at_level(logging.WARNING, logger="engine_service.build"):
        engine = build_engine(settings)
    said = warn_unmatched(settings, engine.tools)
    assert said == ["[tools] approval entry 'calcualte' matches no tool: no call asks for it"]
    assert "'calcualte' matches no tool" in caplog.text
    assert "'calculate'" not in caplog.text


def test_an_agents_unmatched_tool_glob_is_a_warning_naming_the_agent(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        """
[[mcp.servers]]
name = "files"
command = "true"

[[agents]]
name = "a"
tools = ["calculate", "calcualte", "files__*"]
approval = ["nothing_here"]
""",
    )
    settings = load_settings(path, {})
    engine = build_engine(settings)
    said = warn_unmatched(settings, engine.tools)
    assert said == [
        "agent 'a': tools entry 'calcualte' matches no tool",  # files__*: not known yet
        "agent 'a': approval entry 'nothing_here' matches no tool",
    ]
