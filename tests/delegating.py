"""The settings of a ``lead`` agent that delegates to a ``researcher`` whose ``calculate``
waits for a person's approval: the sub-agent approval tests over gRPC, AG-UI and
``/agentik`` (issue 23) share them."""

from __future__ import annotations

from pathlib import Path

from agentik.config import Settings, load_settings

DELEGATING = """
[llm]
base_url = "{url}"
api_key = "k"
max_retries = 0

[[agents]]
name = "lead"
model = "lead-model"
tools = ["agent:researcher"]

[[agents]]
name = "researcher"
model = "research-model"
tools = ["calculate"]
approval = ["calculate"]
"""


def delegating_settings(directory: Path, llm_url: str) -> Settings:
    """The delegating agents' settings (written to ``directory``), on the LLM at
    ``llm_url``, a gRPC port of the system's choosing and a memory store."""
    path = directory / "agentik.toml"
    path.write_text(DELEGATING.format(url=llm_url))
    return load_settings(path, {"AGENTIK_GRPC_ADDR": "127.0.0.1:0", "AGENTIK_STORE": "memory://"})
