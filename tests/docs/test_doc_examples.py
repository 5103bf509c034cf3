"""Every example in README.md and docs/*.md runs, so none can rot.

Each fenced ``sh``/``bash``, ``python``, ``toml``, ``ts``, ``js``, ``go`` and ``java`` block is
run — or listed below as excluded, with the reason — against live stacks (the engine and the
facade under gunicorn, the offline model), as a reader would in one shell per document:

- shell commands run one by one in bash, as written; ``export``/``NAME=value`` carry on to the
  next command and block of the same document, so an id an example keeps in a variable
  (``ID=$(curl ... | python3 -c ...)``) is there for the next; ``curl`` fails on any HTTP
  error status (``--fail-with-body``), and an output with an error body (``/agentik``'s,
  JSON-RPC's) fails too; ``.venv/bin/`` is the venv's (no ``buf`` on ``PATH``: a reader
  has none); ``localhost:8000``/``127.0.0.1:8000``/``HOST:8000`` and ``127.0.0.1:50051``
  become the stack's ports;
- a placeholder a reader would have to replace by hand, ``<id>``, fails the example (capture
  the id in a variable instead); what is still filled in: a principal's token
  (``<alice's token>``), the ids a document abbreviates (:data:`ABBREVIATED`, ``9f0c...``);
- ``[ENV=...] make run`` picks the stack the block runs against (one per distinct setting,
  started once); alone in its block, its settings are loaded and must be valid;
- commands that follow a stream forever (``/events`` without ``until_idle``, ``Subscribe``)
  must still be streaming after a few seconds, then are stopped;
- ``python`` blocks run as scripts (a block opened by ``# NAME.py`` is that file, importable
  by the document's later blocks); ``toml`` blocks load as the configuration file.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import TypeVar, cast

import pytest

from agentik.config import load_settings
from tests.agentik.config.settings_rows import setting_keys
from tests.docs.examples import ROOT, Block, blocks, commands
from tests.fakes.fake_openai import FakeOpenAI
from tests.web.e2e.conftest import Stack

pytestmark = [pytest.mark.processes, pytest.mark.timeout(240)]

BIN = Path(sys.executable).parent
READER_PATH = [
    d for d in os.environ["PATH"].split(os.pathsep) if d and Path(d).resolve() != BIN.resolve()
]
"""A reader's ``PATH`` after ``make run``: the venv is not on it (``.venv/bin/buf``, not
``buf``)."""
_V = TypeVar("_V")
COMMAND_WAIT = 30.0
"""Upper bound for one command, in seconds."""
FOLLOW_WAIT = 3.0
"""How long a command that follows a stream forever is watched."""

EXCLUDED: dict[tuple[str, str], str] = {
    # (document, text in the block): why the test cannot run it
    ("README.md", "OPENAI_BASE_URL=http://localhost:11434/v1"): "needs a real LLM (Ollama, OpenAI)",
    ("docs/scaling.md", "db.internal"): "other hosts and their PostgreSQL",
    ("docs/agentik-api.md", "new EventSource"): "browser code; the same stream is curl'd above",
    ("docs/agui.md", "new HttpAgent"): "an app's fragment (render, showError); "
    "tests/node/agui_conformance.mjs runs HttpAgent",
    ("docs/agui.md", "class AgentikAgent extends HttpAgent"): "an app's fragment; "
    "tests/node/agui_2026.mjs defines and runs the same getCapabilities",
    ("docs/agui.md", "agent.pendingInterrupts"): "an app's fragment; tests/node/agui_hitl.mjs "
    "runs this resume",
    ("docs/grpc.md", "grpcurl -plaintext"): "grpcurl is not packaged on Debian, PyPI or npm; "
    "the buf curl block above makes the same calls",
    ("docs/clients.md", "createGrpcTransport({ baseUrl: "): "tests/node/ts_client.ts makes "
    "these calls, compiled by tsc and run by tests/engine/test_ts_client.py",
    ("docs/webhooks.md", "function verify(secret, headers, body"): "a receiver's module; "
    "tests/engine/webhooks/test_doc_verifiers.py runs it against signed deliveries",
    ("docs/clients.md", "--go-grpc_out"): "no Go toolchain here",
    ("docs/clients.md", "grpc.NewClient"): "no Go toolchain here",
    ("docs/clients.md", "--grpc-java_out"): "no Maven artifacts (grpc-java) here",
    ("docs/clients.md", "ManagedChannelBuilder"): "no Maven artifacts (grpc-java) here",
}
SKIPPED_COMMANDS: dict[str, str] = {
    # a command starting with: why it is not run
    "make test": "the test suite itself",
    ".venv/bin/pytest": "test runs: `make test` runs them",
    "AGENTIK_SCREENSHOT_DIR=docs/img .venv/bin/pytest": "test runs: `make test` runs them",
    ".venv/bin/python -m bench.": "benchmarks, minutes long",
    "grpcurl": "grpcurl is not packaged on Debian, PyPI or npm",
    "npm install": "make node-deps installs the same packages, pinned, in tests/node",
}
SERVER_ENV = {env for _, env, _ in setting_keys()} | {"AGENTIK_A2A_AGENTS"}
LISTEN_ENV = {"AGENTIK_HTTP_ADDR", "AGENTIK_GRPC_ADDR"}
BY_HAND = re.compile(r"<id>")
"""A placeholder a reader cannot paste: the shell reads ``<id>`` as a redirection."""
ERROR_BODY = re.compile(r'"error":\s*\{\s*"code"')
"""An error body: /agentik's, or JSON-RPC's (A2A answers those with HTTP 200)."""
FOLLOWS = re.compile(r"/events(?![^\s'\"]*until_idle)|/Subscribe\b")


APPROVAL = {"AGENTIK_TOOLS_APPROVAL": "calculate", "AGENTIK_TOOLS_ASK_USER": "true"}
TOKENS = {"AGENTIK_TOKENS": "alice:" + "a1" * 16}
BLOCK_SERVER_ENV: dict[tuple[str, str], dict[str, str]] = {
    # (document, text in the block): the server settings its section describes
    ("docs/grpc.md", "Bearer {token}"): TOKENS,
    ("docs/a2a.md", '"taskId": "9f0c..."'): APPROVAL,
    ("docs/agui.md", '"runId": "run-1"'): APPROVAL,
    ("docs/agui.md", '"runId": "run-2"'): APPROVAL,
}
ABBREVIATED: dict[str, re.Pattern[str]] = {
    # an id a document abbreviates: where the previous outputs show it in full
    "092daa92...": re.compile(r'"interrupts":\s*\[\{"id":\s*"([^"]+)"'),
}
PRELUDES: dict[tuple[str, str], str] = {
    # (document, text in the block): what a snippet names from the one before it
    ("docs/grpc.md", "Bearer {token}"): (
        "import os, grpc\n"
        "from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb, engine_pb2_grpc\n"
        "channel = grpc.insecure_channel(os.environ['AGENTIK_ENGINE_TARGET'])\n"
        "stub = engine_pb2_grpc.AgentEngineStub(channel)\n"
        "token = '<alice's token>'\n"
    ),
}


def block_value(table: dict[tuple[str, str], _V], block: Block) -> _V | None:
    return next((v for (p, t), v in table.items() if p == block.path and t in block.text), None)


def waiting_a2a_task(stack: Stack) -> str:
    """A task that waits for an approval: what a2a.md's resume example continues."""
    message = {"messageId": "m-doc", "role": "ROLE_USER", "parts": [{"text": "calculate 2+2"}]}
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}
    with stack.client() as http:
        reply = http.post("/", json=body, headers={"A2A-Version": "1.0"}).raise_for_status()
    task = reply.json()["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", task
    return str(task["id"])


def make_run(command: str) -> str | None:
    """The ``NAME=value`` words before a ``make run`` command, or None for another command."""
    line = command.replace("\\\n", " ").strip()
    if line != "make run" and not line.endswith(" make run"):
        return None
    prefix = line.removesuffix("make run")
    words = shlex.split(prefix)
    return prefix if all(re.match(r"\w+=", word) for word in words) else None


def excluded_reason(block: Block) -> str | None:
    for (path, text), reason in EXCLUDED.items():
        if block.path == path and text in block.text:
            return reason
    return None


def skipped_reason(command: str) -> str | None:
    return next((why for head, why in SKIPPED_COMMANDS.items() if command.startswith(head)), None)


class Stacks:
    """One live stack per distinct server setting, started on first use."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self._running: dict[frozenset[tuple[str, str]], Stack] = {}

    def get(self, env: dict[str, str]) -> Stack:
        key = frozenset(env.items())
        if key not in self._running:
            offline = cast(FakeOpenAI, SimpleNamespace(base_url=""))
            logs = self.logs / f"stack{len(self._running)}"
            logs.mkdir()
            self._running[key] = Stack(
                offline, logs, OPENAI_API_KEY="", AGENTIK_WEB_WORKERS="1", **env
            )
        return self._running[key]

    def point_at(self, stack: Stack, env: dict[str, str]) -> None:
        """Make the addresses of the other stacks in ``env`` (``BASE=...``) this one's."""
        for other in self._running.values():
            for old, new in (
                (other.http_port, stack.http_port),
                (other.grpc_port, stack.grpc_port),
            ):
                for name, value in env.items():
                    env[name] = value.replace(f"127.0.0.1:{old}", f"127.0.0.1:{new}")

    def stop(self) -> None:
        for stack in self._running.values():
            stack.stop()


@dataclass
class Reader:
    """One document read top to bottom in one shell."""

    workdir: Path
    env: dict[str, str]
    replacements: dict[str, str] = field(default_factory=dict)


@pytest.fixture(scope="module")
def stacks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stacks]:
    running = Stacks(tmp_path_factory.mktemp("doc-stacks"))
    yield running
    running.stop()


@pytest.fixture(scope="module")
def tools_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``curl`` that fails on an HTTP error status."""
    path = tmp_path_factory.mktemp("doc-bin")
    curl = path / "curl"
    curl.write_text('#!/bin/sh\nexec /usr/bin/curl --fail-with-body "$@"\n')
    curl.chmod(0o755)
    return path


def server_env(reader: Reader, block: Block) -> dict[str, str]:
    """The settings of the stack a block runs against: the document's exported server
    settings and those of the block's ``make run`` line."""
    env = {k: v for k, v in reader.env.items() if k in SERVER_ENV and k not in LISTEN_ENV}
    if (settings := block_value(BLOCK_SERVER_ENV, block)) is not None:
        env.update(settings)
    for command in commands(block.text) if block.lang in ("sh", "bash") else ():
        if (assignments := make_run(command)) is not None:
            env.update(evaluate_assignments(assignments, reader))
    return {k: v for k, v in env.items() if k not in LISTEN_ENV}


def evaluate_assignments(assignments: str, reader: Reader) -> dict[str, str]:
    """``A=1 B=$(...)``, as bash evaluates them."""
    if not assignments.strip():
        return {}
    script = f"{assignments} env -0"
    out = subprocess.run(
        ["bash", "-c", script], env=reader.env, capture_output=True, timeout=COMMAND_WAIT
    ).stdout.decode()
    names = [part.split("=", 1)[0] for part in shlex.split(assignments)]
    values = dict(item.split("=", 1) for item in out.split("\0") if "=" in item)
    return {name: values[name] for name in names}


def fill(text: str, stack: Stack, reader: Reader) -> str:
    """The stack's ports and the ids from the previous outputs."""
    http = f"127.0.0.1:{stack.http_port}"
    for host in ("localhost:8000", "127.0.0.1:8000", "HOST:8000"):
        text = text.replace(host, http)
    text = text.replace("127.0.0.1:50051", f"127.0.0.1:{stack.grpc_port}")
    text = text.replace(".venv/bin/", f"{BIN}/")
    for placeholder, value in reader.replacements.items():
        text = text.replace(placeholder, value)
    tokens = dict(
        pair.split(":", 1) for pair in stack.env.get("AGENTIK_TOKENS", "").split(",") if pair
    )
    for principal, token in tokens.items():
        text = text.replace(f"<{principal}'s token>", token)
    return text


def run_command(command: str, stack: Stack, reader: Reader, tools: Path) -> str:
    """Run one shell command as the reader would; its output. Fails on a non-zero exit."""
    env_file = reader.workdir / ".env0"
    env = {
        **reader.env,
        "PATH": os.pathsep.join([str(tools), *READER_PATH]),
        "AGENTIK_ENGINE_TARGET": f"127.0.0.1:{stack.grpc_port}",
        "AGENTIK_HTTP_ADDR": f"127.0.0.1:{stack.http_port}",
    }
    script = f'set -a\n{command}\n__rc=$?; env -0 > "{env_file}"; exit $__rc\n'
    follows = bool(FOLLOWS.search(command))
    process = subprocess.Popen(
        ["bash", "-o", "pipefail", "-c", script],
        env=env,
        cwd=reader.workdir,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        # what a reader types into an interactive command (agentik chat)
        wait = FOLLOW_WAIT if follows else COMMAND_WAIT
        out, _ = process.communicate(b"hello\n", timeout=wait)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGTERM)
        out, _ = process.communicate(timeout=COMMAND_WAIT)
        text = out.decode(errors="replace")
        assert follows, f"{command!r} did not end within {COMMAND_WAIT} s:\n{text}"
        # still streaming (an HTTP error would have ended it): an SSE or gRPC stream
        assert re.search(r"^(retry|event|data): |^: keep-alive|\"seq\"", text, re.M), text
        return text
    text = out.decode(errors="replace")
    assert process.returncode == 0, f"{command!r} exited {process.returncode}:\n{text}"
    assert not ERROR_BODY.search(text), f"{command!r} answered an error:\n{text}"
    values = dict(item.split("=", 1) for item in env_file.read_text().split("\0") if "=" in item)
    reader.env = {k: v for k, v in values.items() if k not in INJECTED}
    return text


INJECTED = {"PATH", "AGENTIK_ENGINE_TARGET", "AGENTIK_HTTP_ADDR", "_", "SHLVL", "PWD", "__rc"}


def remember(out: str, reader: Reader) -> None:
    """Keep the ids a document abbreviates, for its later examples."""
    for placeholder, pattern in ABBREVIATED.items():
        if found := pattern.search(out):
            reader.replacements[placeholder] = found.group(1)


def npm_packages_installed() -> bool:
    """Whether tests/node's packages are there (``make node-deps``); where node clients are
    required (CI sets ``AGENTIK_REQUIRE_NODE``) their absence fails."""
    if (ROOT / "tests" / "node" / "node_modules" / "@bufbuild" / "protoc-gen-es").is_dir():
        return True
    if os.environ.get("AGENTIK_REQUIRE_NODE"):
        pytest.fail("the docs' npm examples need `make node-deps` (npm ci in tests/node)")
    return False


def run_shell(block: Block, stacks: Stacks, reader: Reader, tools: Path) -> None:
    stack = stacks.get(server_env(reader, block))
    stacks.point_at(stack, reader.env)
    if '"taskId": "9f0c..."' in block.text:
        reader.replacements["9f0c..."] = waiting_a2a_task(stack)
    for command in commands(block.text):
        if make_run(command) is not None or skipped_reason(command):
            continue
        if "node_modules/" in command and not npm_packages_installed():
            continue  # where node is required (CI), npm_packages_installed fails instead
        assert not BY_HAND.search(command), (
            f"{block.where}: a reader cannot paste {command!r}: keep the id in a variable "
            "(ID=$(curl ... | python3 -c ...)) and use $ID"
        )
        out = run_command(fill(command, stack, reader), stack, reader, tools)
        remember(out, reader)


def only_make_run(block: Block) -> bool:
    runnable = [c for c in commands(block.text) if not skipped_reason(c)]
    return bool(runnable) and all(make_run(c) is not None for c in runnable)


def check_make_run(block: Block, reader: Reader) -> None:
    """A ``make run`` line's settings load (a wrong name or value fails here), in the
    reader's directory: ``AGENTIK_CONFIG=agentik.toml`` is the document's last TOML block."""
    for command in commands(block.text):
        if (assignments := make_run(command)) is not None:
            env = {**reader.env, **evaluate_assignments(assignments, reader)}
            with contextlib.chdir(reader.workdir):
                load_settings(None, {k: v for k, v in env.items() if k.startswith("AGENTIK_")})


def run_python(block: Block, stacks: Stacks, reader: Reader) -> None:
    """Run a Python block as a script; a block that names its file is written there too."""
    stack = stacks.get(server_env(reader, block))
    first = block.text.splitlines()[0]
    if match := re.match(r"# ([\w/]+\.py)\b", first):
        path = reader.workdir / match.group(1)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(block.text)
        for parent in path.relative_to(reader.workdir).parents[:-1]:
            (reader.workdir / parent / "__init__.py").touch()
    source = fill((block_value(PRELUDES, block) or "") + block.text, stack, reader)
    result = python_script(source, stack, reader.workdir)
    assert result.returncode == 0, f"{block.where}:\n{result.stdout}{result.stderr}"


def python_script(
    source: str, stack: Stack, workdir: Path, **exported: str
) -> subprocess.CompletedProcess[str]:
    """``source`` run as a reader's script against ``stack``, with the variables the reader
    ``exported`` (none of this process's ``AGENTIK_*``)."""
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("AGENTIK_", "OPENAI_"))},
        "PYTHONPATH": f"{ROOT}{os.pathsep}{workdir}",
        "AGENTIK_ENGINE_TARGET": f"127.0.0.1:{stack.grpc_port}",
        **exported,
    }
    return subprocess.run(
        [sys.executable, "-c", source],
        env=env,
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=COMMAND_WAIT * 2,
    )


def run_toml(block: Block, reader: Reader, monkeypatch: pytest.MonkeyPatch) -> None:
    """The block loads as the configuration file (``${NAME}`` given a value)."""
    path = reader.workdir / "agentik.toml"
    path.write_text(block.text)
    env = {
        name: f"{name.lower()}-{name.lower()}-0123456789abcdef"
        for name in re.findall(r"\$\{(\w+)\}", block.text)
    }
    monkeypatch.syspath_prepend(str(reader.workdir))
    load_settings(path, env)


def test_every_example_in_the_docs_runs(
    stacks: Stacks,
    tools_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    readers: dict[str, Reader] = {}
    ran: list[str] = []
    started = time.monotonic()
    for block in blocks():
        if excluded_reason(block):
            continue
        if block.path not in readers:
            workdir = tmp_path / block.path.replace("/", "_")
            workdir.mkdir()
            # the paths a reader in a checkout has: the contract, the npm packages
            (workdir / "proto").symlink_to(ROOT / "proto")
            (workdir / "node_modules").symlink_to(ROOT / "tests" / "node" / "node_modules")
            base = {
                k: v for k, v in os.environ.items() if not k.startswith(("AGENTIK_", "OPENAI_"))
            }
            readers[block.path] = Reader(workdir, base)
        reader = readers[block.path]
        if block.lang in ("sh", "bash"):
            if only_make_run(block):
                check_make_run(block, reader)
            else:
                run_shell(block, stacks, reader, tools_dir)
        elif block.lang == "python":
            run_python(block, stacks, reader)
        elif block.lang == "toml":
            run_toml(block, reader, monkeypatch)
        else:
            pytest.fail(f"{block.where}: a {block.lang} example neither runs nor is excluded")
        ran.append(block.where)
    print(f"{len(ran)} examples ran in {time.monotonic() - started:.1f} s")


def test_every_exclusion_still_names_an_example() -> None:
    """An excluded example that was removed or rewritten leaves no stale excuse behind."""
    every = blocks()
    for (path, text), reason in EXCLUDED.items():
        assert any(b.path == path and text in b.text for b in every), (path, text, reason)


def test_the_mcp_http_client_sends_agentik_token_when_it_is_set_and_no_header_without(
    stacks: Stacks, tmp_path: Path
) -> None:
    """docs/mcp.md's HTTP client, as a reader of a server with tokens runs it: with their
    token exported (the test above runs it as pasted, against a server without tokens)."""
    [block] = [b for b in blocks() if b.path == "docs/mcp.md" and "AGENTIK_TOKEN" in b.text]
    assert block.text.isascii(), "a placeholder a reader pastes into a header must be ASCII"
    stack = stacks.get(TOKENS)
    source = fill(block.text, stack, Reader(tmp_path, {}))
    token = TOKENS["AGENTIK_TOKENS"].split(":", 1)[1]

    sent = python_script(source, stack, tmp_path, AGENTIK_TOKEN=token)
    assert sent.returncode == 0, sent.stdout + sent.stderr
    assert "hello" in sent.stdout, sent.stdout  # the answer, as the snippet prints it

    # Without it, no header: the server's 401, which the MCP client raises.
    refused = python_script(source, stack, tmp_path)
    assert refused.returncode != 0 and "MCPError" in refused.stderr, refused.stderr
