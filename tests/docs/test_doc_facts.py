"""What the newcomer pages say about the product matches the product: the commands that need
the development tools say so, the MCP tools are counted and named alike everywhere, and the
``agentik tools`` samples have the columns the command prints."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.docs.examples import ROOT, blocks, commands, doc_paths

DEV_TOOLS = re.compile(r"\.venv/bin/buf\b|\bgrpc_tools\b")
"""Commands that need ``make dev-install`` (buf and grpcio-tools are development tools)."""
SAID_BEFORE = 1200
"""How far before a block (characters) the prose may say what it needs."""
NUMBERS = ("one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")


def test_every_command_that_needs_the_dev_tools_names_the_venvs_and_make_dev_install() -> None:
    for path in doc_paths():
        text = path.read_text()
        for block in [b for b in blocks() if b.path == str(path.relative_to(ROOT))]:
            if block.lang not in ("sh", "bash"):
                continue
            for command in commands(block.text):
                # A reader's PATH has no .venv/bin: `buf` alone is "command not found".
                assert not re.match(r"(\w+=\S+\s+)*buf\b", command), (block.where, command)
                if DEV_TOOLS.search(command):
                    start = _offset(text, block.line)
                    before = text[max(0, start - SAID_BEFORE) : start] + block.text
                    assert "make dev-install" in before, (block.where, command)


def _offset(text: str, line: int) -> int:
    """Where line ``line`` (1-based) starts."""
    return sum(len(row) + 1 for row in text.split("\n")[: line - 1])


def _mcp_tools() -> list[str]:
    source = (ROOT / "web_facade" / "mcp" / "server.py").read_text()
    return re.findall(r"@server\.tool\(\)\s+async def (\w+)\(", source)


def _section(text: str, heading: str) -> str:
    start = text.index(heading)
    end = re.compile(r"^#{1,3} ", re.M).search(text, start + len(heading))
    return text[start : end.start() if end else len(text)]


def test_the_mcp_tools_are_named_and_counted_alike_in_the_readme_and_mcp_md() -> None:
    tools = _mcp_tools()
    assert len(tools) >= 5, tools
    number = NUMBERS[len(tools) - 1]
    mcp = (ROOT / "docs" / "mcp.md").read_text()
    server = mcp[mcp.index("## agentik as an MCP server") :]
    rows = re.findall(r"^\| `(\w+)` \|", _section(server, "## agentik as an MCP server"), re.M)
    assert sorted(rows) == sorted(tools)
    readme = _section((ROOT / "README.md").read_text(), "### agentik as an MCP server")
    for name in tools:
        assert f"`{name}`" in readme, name
    for text in (server, readme):
        said = re.findall(
            rf"\b({'|'.join(NUMBERS)})\s+tools\b|There are (\w+):", text, re.IGNORECASE
        )
        counts = [(a or b).lower() for a, b in said]
        assert counts and set(counts) == {number}, counts


def _tools_header() -> list[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTIK_", "OPENAI_"))}
    ran = subprocess.run(
        [sys.executable, "-m", "agentik.cli", "tools"],
        env={**env, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    header = next(line for line in ran.stdout.splitlines() if line.startswith("TOOL "))
    return re.split(r"\s{2,}", header.strip())


@pytest.mark.timeout(120)
def test_the_agentik_tools_samples_have_the_columns_the_command_prints() -> None:
    columns = _tools_header()
    samples = 0
    for path in doc_paths():
        for sample in re.findall(r"(?ms)^```\n(\$ [^\n]*\btools\n.*?)^```", path.read_text()):
            lines = sample.splitlines()
            at = next(i for i, line in enumerate(lines) if line.startswith("TOOL "))
            assert re.split(r"\s{2,}", lines[at].strip()) == columns, (path.name, lines[at])
            for row in lines[at + 1 :]:
                if not row.strip():
                    break
                assert len(re.split(r"\s{2,}", row.strip())) == len(columns), (path.name, row)
            samples += 1
    assert samples >= 2  # docs/mcp.md's and docs/tools.md's
