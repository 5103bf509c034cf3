"""The engine as its own process: `python -m engine_service`, as the Procfile runs it."""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from agentik.cli import build_parser
from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from agentik.rpc.agentik.engine.v1 import engine_pb2_grpc as pb_grpc
from tests.engine.harness import WAIT

ROOT = Path(__file__).resolve().parents[2]


def engine_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTIK_", "OPENAI_"))}
    env.update(
        AGENTIK_GRPC_ADDR="127.0.0.1:0",
        AGENTIK_STORE=f"sqlite:///{tmp_path / 'engine.db'}",
        AGENTIK_SHUTDOWN_GRACE="2",
    )
    env.update(extra)
    return env


def read_until(process: subprocess.Popen[str], pattern: str, seen: list[str]) -> re.Match[str]:
    """Read the engine's log until a line matches; bounded by WAIT."""
    assert process.stderr is not None
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        line = process.stderr.readline()
        if not line:
            break
        seen.append(line)
        found = re.search(pattern, line)
        if found:
            return found
    raise AssertionError(f"no log line matched {pattern!r}; log was:\n{''.join(seen)}")


@pytest.fixture
def engine_process(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], list[str]]]:
    process = subprocess.Popen(
        [sys.executable, "-m", "engine_service"],
        cwd=ROOT,
        env=engine_env(tmp_path),
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        yield process, []
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(WAIT)
        if process.stderr is not None:
            process.stderr.close()


def test_the_engine_starts_on_defaults_says_it_is_offline_and_answers_a_turn(
    engine_process: tuple[subprocess.Popen[str], list[str]],
) -> None:
    process, log = engine_process
    port = read_until(process, r"listening on 127\.0\.0\.1:(\d+)", log).group(1)
    read_until(process, r"OFFLINE model", log)

    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = pb_grpc.AgentEngineStub(channel)
        request = pb.RunRequest(
            session_id="cli",
            create_session=True,
            messages=[
                pb.Message(
                    role=pb.ROLE_USER,
                    content=[pb.ContentPart(text=pb.TextPart(text="calculate 6*7"))],
                )
            ],
        )
        events = list(stub.Run(request, timeout=WAIT))
    names = [e.WhichOneof("kind") for e in events]
    assert names[0] == "run_started" and names[-1] == "run_finished"
    result = next(e.tool_call_result for e in events if e.WhichOneof("kind") == "tool_call_result")
    assert "42" in result.content
    answer = "".join(
        e.text_message_content.delta
        for e in events
        if e.WhichOneof("kind") == "text_message_content"
    )
    assert "42" in answer

    process.send_signal(signal.SIGTERM)
    assert process.wait(WAIT) == 0
    read_until(process, r"engine stopped", log)


def test_a_bad_setting_stops_start_up_with_a_message_naming_it(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "engine_service"],
        cwd=ROOT,
        env=engine_env(tmp_path, AGENTIK_MAX_TOOL_ROUNDS="many"),
        capture_output=True,
        text=True,
        timeout=WAIT,
    )
    assert result.returncode == 2
    assert "max_tool_rounds" in result.stderr
    assert "AGENTIK_MAX_TOOL_ROUNDS" in result.stderr


def test_a_config_file_that_does_not_exist_stops_start_up(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "engine_service", "--config", str(tmp_path / "nope.toml")],
        cwd=ROOT,
        env=engine_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=WAIT,
    )
    assert result.returncode == 2
    assert "nope.toml" in result.stderr


def test_agentik_tools_lists_the_native_tools(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "agentik.cli", "tools"],
        cwd=ROOT,
        env=engine_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=WAIT,
    )
    assert result.returncode == 0, result.stderr
    for name in ("calculate", "current_time", "update_state"):
        assert re.search(rf"^{name}\s+native\s+ready\s+-$", result.stdout, re.MULTILINE), (
            result.stdout
        )
    assert "ask_user" not in result.stdout
    assert result.stderr == (
        "agentik tools: the tools of the defaults and the environment (no --config or "
        "AGENTIK_CONFIG); a running engine offers what its own settings name: give this "
        "command the same --config and environment\n"
    )


def test_agentik_tools_names_the_config_file_it_read(tmp_path: Path) -> None:
    config = tmp_path / "agentik.toml"
    config.write_text("")
    for args, env in (
        (["tools", "--config", str(config)], {}),
        (["tools"], {"AGENTIK_CONFIG": str(config)}),
    ):
        result = subprocess.run(
            [sys.executable, "-m", "agentik.cli", *args],
            cwd=ROOT,
            env=engine_env(tmp_path, **env),
            capture_output=True,
            text=True,
            timeout=WAIT,
        )
        source = "--config" if args[1:] else "AGENTIK_CONFIG"
        assert result.returncode == 0, result.stderr
        said = f"agentik tools: the tools of {config} ({source}) and the environment; "
        assert result.stderr.startswith(said), result.stderr


def test_agentik_tools_says_which_calls_wait_for_a_person(tmp_path: Path) -> None:
    env = {
        **engine_env(tmp_path),
        "AGENTIK_TOOLS_APPROVAL": "calc*",
        "AGENTIK_TOOLS_ASK_USER": "true",
    }
    result = subprocess.run(
        [sys.executable, "-m", "agentik.cli", "tools"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=WAIT,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout
    assert re.search(r"^calculate\s+native\s+ready\s+approves$", lines, re.MULTILINE), lines
    assert re.search(r"^current_time\s+native\s+ready\s+-$", lines, re.MULTILINE), lines
    assert re.search(r"^ask_user\s+native\s+ready\s+answers$", lines, re.MULTILINE), lines


def test_an_mcp_server_naming_an_unset_variable_stops_the_engine_naming_it(
    tmp_path: Path,
) -> None:
    config = tmp_path / "agentik.toml"
    config.write_text(
        '[[mcp.servers]]\nname = "secret"\ncommand = "mcp-secret"\n'
        'env = { TOKEN = "${AGENTIK_TEST_UNSET_MCP_TOKEN}" }\n'
    )
    result = subprocess.run(
        [sys.executable, "-m", "engine_service", "--config", str(config), "engine"],
        cwd=ROOT,
        env=engine_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=WAIT,
    )
    assert result.returncode == 2
    assert "configuration error" in result.stderr
    assert "'AGENTIK_TEST_UNSET_MCP_TOKEN', which is unset" in result.stderr


@pytest.mark.parametrize(
    ("command", "variable", "what"),
    [
        ("engine", "AGENTIK_GRPC_ADDR", "engine"),
        ("web", "AGENTIK_HTTP_ADDR", "web facade"),
        ("serve", "AGENTIK_HTTP_ADDR", "web facade"),
        ("serve", "AGENTIK_GRPC_ADDR", "engine"),
    ],
)
def test_a_taken_address_stops_the_start_with_one_line_naming_the_setting(
    tmp_path: Path, command: str, variable: str, what: str
) -> None:
    import socket

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = f"127.0.0.1:{holder.getsockname()[1]}"
        env = engine_env(tmp_path, **{variable: taken})
        if variable == "AGENTIK_GRPC_ADDR":
            env["AGENTIK_HTTP_ADDR"] = "127.0.0.1:0"  # not the one this case is about
        started = time.monotonic()
        result = subprocess.run(
            [sys.executable, "-m", "agentik.cli", command],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=WAIT,
        )
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(
        f"agentik: cannot listen: {taken} is already in use by another program, so the {what} "
        "cannot listen there"
    )
    assert "is another agentik running" not in result.stderr
    assert variable in result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.splitlines()) == 1
    assert time.monotonic() - started < WAIT / 2


@pytest.mark.parametrize("command", ["engine", "web"])
def test_a_card_skill_no_card_can_carry_stops_the_start_naming_the_agent_and_skill(
    tmp_path: Path, command: str
) -> None:
    config = tmp_path / "agentik.toml"
    config.write_text(
        '[[agents]]\nname = "desk"\n'
        'skills = [{ id = "help", name = "Help", description = "Helps", tags = [""] }]\n'
    )
    env = engine_env(tmp_path, AGENTIK_HTTP_ADDR="127.0.0.1:0")
    result = subprocess.run(
        [sys.executable, "-m", "agentik.cli", "--config", str(config), command],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=WAIT,
    )
    assert result.returncode == 2, result.stderr
    assert "configuration error: invalid agents.desk.skills[0]" in result.stderr
    assert "(skill 'help')" in result.stderr and "Traceback" not in result.stderr


def test_an_mcp_server_installed_beside_agentik_is_found_without_the_virtualenv_on_path(
    tmp_path: Path,
) -> None:
    """As docs/mcp.md's example runs under `make run`: `.venv/bin` is not on PATH."""
    config = tmp_path / "agentik.toml"
    config.write_text('[[mcp.servers]]\nname = "time"\ncommand = "mcp-server-time"\n')
    env = {**engine_env(tmp_path), "PATH": "/usr/bin:/bin"}
    assert str(Path(sys.executable).parent) not in env["PATH"]
    result = subprocess.run(
        [sys.executable, "-m", "agentik.cli", "--config", str(config), "tools"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=WAIT * 3,
    )
    assert result.returncode == 0, result.stderr
    assert re.search(r"^time__get_current_time\s+mcp:time\s+ready", result.stdout, re.MULTILINE), (
        result.stdout
    )


def test_agentik_tools_agent_lists_that_agents_tools_and_approvals(tmp_path: Path) -> None:
    config = tmp_path / "agentik.toml"
    config.write_text(
        '[[agents]]\nname = "calc"\ntools = ["calculate", "agent:other"]\napproval = ["calc*"]\n'
        '[[agents]]\nname = "other"\ntools = ["current_time"]\n'
    )

    def tools(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "agentik.cli", "--config", str(config), "tools", *args],
            cwd=ROOT,
            env=engine_env(tmp_path),
            capture_output=True,
            text=True,
            timeout=WAIT,
        )

    calc = tools("--agent", "calc")
    assert calc.returncode == 0, calc.stderr
    assert re.search(r"^calculate\s+native\s+ready\s+approves$", calc.stdout, re.MULTILINE)
    assert re.search(r"^agent__other\s+agent:other\s+ready\s+-$", calc.stdout, re.MULTILINE)
    assert "current_time" not in calc.stdout
    other = tools("--agent", "other")
    assert "current_time" in other.stdout and "calculate" not in other.stdout
    missing = tools("--agent", "nobody")
    assert missing.returncode == 2 and "'nobody'" in missing.stderr


def test_the_engine_command_exits_1_when_its_companion_cannot_run() -> None:
    """``agentik serve`` runs ``agentik engine``'s handler with the web workers as its
    companion: when they cannot run, the engine stops and the command exits 1 (0 after a
    signal, as ``test_serve_runs_engine_and_web_together...`` checks)."""
    script = (
        "import argparse, sys\n"
        "from agentik.cli import _engine\n"
        "class Failing:\n"
        "    def start(self): print('started', flush=True)\n"
        "    def check(self): return False\n"
        "    def stop(self): print('stopped', flush=True); return True\n"
        "    def hurry(self): pass\n"
        "    def close(self): print('closed', flush=True)\n"
        "args = argparse.Namespace(config=None, worker=False, workers=None)\n"
        "print('exit', _engine(args, Failing()), flush=True)\n"
    )
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("AGENTIK_")},
        "PYTHONPATH": str(ROOT),
        "AGENTIK_GRPC_ADDR": "127.0.0.1:0",
        "AGENTIK_STORE": "memory://",
    }
    done = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.stdout.split("\n")[:-1] == ["started", "stopped", "closed", "exit 1"], done.stderr
    assert "engine stopped" in done.stderr


def test_config_is_taken_before_or_after_every_command() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    commands = list(sub.choices)
    needed = {"engine": [], "tools": [], "doctor": [], "grpc": ["Health"], "mcp": [], "chat": []}
    assert set(needed) <= set(commands)
    for command in commands:
        given = needed.get(command, [])
        assert parser.parse_args([command, *given]).config is None
        assert parser.parse_args(["--config", "a.toml", command, *given]).config == "a.toml"
        assert parser.parse_args([command, "--config", "b.toml", *given]).config == "b.toml"
        after = parser.parse_args(["--config", "a.toml", command, "--config", "b.toml", *given])
        assert after.config == "b.toml", command


def test_doctor_reads_a_config_given_after_the_command(tmp_path: Path) -> None:
    config = tmp_path / "agentik.toml"
    config.write_text('[web]\nhttp_addr = "127.0.0.1:8123"\n')
    done = subprocess.run(
        [sys.executable, "-m", "agentik.cli", "doctor", "--config", str(config)],
        cwd=tmp_path,
        env={**engine_env(tmp_path), "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=WAIT,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith(f"ok    config  {config}; ")
    assert "web 127.0.0.1:8123" in done.stdout


def started_engine(cwd: Path, *args: str, **env: str) -> tuple[subprocess.Popen[str], list[str]]:
    """``python -m engine_service ARGS`` in ``cwd``, its log read line by line."""
    process = subprocess.Popen(
        [sys.executable, "-m", "engine_service", *args],
        cwd=cwd,
        env={**engine_env(cwd, **env), "PYTHONPATH": str(ROOT)},
        stderr=subprocess.PIPE,
        text=True,
    )
    return process, []


def stopped(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        process.kill()
    process.wait(WAIT)
    if process.stderr is not None:
        process.stderr.close()


def test_the_start_log_names_the_absolute_file_of_a_relative_sqlite_store(tmp_path: Path) -> None:
    process, log = started_engine(tmp_path, AGENTIK_STORE="sqlite:///var/lib/agentik/agentik.db")
    try:
        found = read_until(process, r"listening on .*\(store (.*)\)$", log).group(1)
    finally:
        stopped(process)

    assert found == f"sqlite:///var/lib/agentik/agentik.db ({tmp_path}/var/lib/agentik/agentik.db)"
