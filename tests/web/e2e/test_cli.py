"""``agentik serve`` and ``agentik web`` as a user runs them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
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


def _healthy_serve(env: dict[str, str], tmp_path: Path) -> tuple[Process, str]:
    """``agentik serve`` started and answering ``/health``, and its base URL."""
    serve = Process("serve", [sys.executable, "-m", "agentik.cli", "serve"], env, tmp_path)
    try:
        base = f"http://127.0.0.1:{serve.wait_for_log(GUNICORN_LISTENING)}"
        wait_for(lambda: _healthy(base), "serve to be healthy")
    except BaseException:
        serve.stop()
        raise
    return serve, base


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_serve_runs_engine_and_web_together_and_stops_both_on_a_signal(
    tmp_path: Path, sig: int
) -> None:
    with FakeOpenAI() as llm:
        serve, base = _healthy_serve(_env(llm, tmp_path), tmp_path)
        try:
            created = httpx.post(f"{base}/agentik/conversations", json={"title": "s"}, timeout=WAIT)
            assert created.status_code == 201
        finally:
            code = serve.stop(sig)
    assert code == 0, serve.log()
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{base}/health", timeout=2.0)


def _children(pid: int) -> list[int]:
    text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    return [int(child) for child in text.split()]


def _cmdline(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1]


def _web_workers(pid: int) -> list[int]:
    return [c for c in _children(pid) if "web_facade.serve_web" in _cmdline(c)]


def test_serve_is_the_engine_and_starts_the_web_workers_with_no_gunicorn_master(
    tmp_path: Path,
) -> None:
    """Memory (docs/performance.md "Idle memory"): the serve process runs the engine itself
    and its only children are the facade's workers (no supervisor, no gunicorn master). A
    worker killed is replaced, as gunicorn's master would, and the facade answers again."""
    with FakeOpenAI() as llm:
        serve, base = _healthy_serve(_env(llm, tmp_path), tmp_path)
        try:
            pid = serve.popen.pid
            assert _cmdline(pid)[-1] == "serve"
            children = _children(pid)
            assert children == _web_workers(pid), [_cmdline(c) for c in children]
            assert len(children) == 1
            assert "engine listening on" in serve.log()  # the engine is this process
            assert "agentik: engine on" in serve.log()
            (first,) = children
            os.kill(first, signal.SIGKILL)
            wait_for(
                lambda: bool(_web_workers(pid)) and _web_workers(pid) != [first],
                "a new web worker",
            )
            wait_for(lambda: _healthy(base), "serve to be healthy again")
            assert f"web worker {first} died (signal 9); starting another" in serve.log()
            metrics = httpx.get(f"{base}/metrics", timeout=WAIT)
            assert metrics.status_code == 200
        finally:
            code = serve.stop(signal.SIGTERM)
    assert code == 0, serve.log()
    assert "Traceback" not in serve.log()


CRASH_LOOP = (
    "web workers died 3 times within 60s, more than [web] worker_restarts_per_minute = 2 "
    "(AGENTIK_WEB_WORKER_RESTARTS_PER_MINUTE) allows"
)


def _kill_each_worker(
    parent: Process, workers: Callable[[], list[int]], up: Callable[[], bool], times: int
) -> None:
    """A crash loop: ``times`` times, wait until the facade answers (its worker booted),
    then kill the worker."""
    killed: list[int] = []
    booted: list[int] = []

    def answering() -> bool:
        # One listing per look: the children may change between two.
        current = workers()
        if len(current) != 1 or current[0] in killed or not up():
            return False
        booted[:] = current
        return True

    for _ in range(times):
        wait_for(answering, "a new web worker to answer")
        killed.append(booted[0])
        os.kill(booted[0], signal.SIGKILL)
    try:
        parent.popen.wait(WAIT)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"{parent.name} went on:\n{parent.log()}") from None


def test_serve_stops_with_exit_1_when_its_web_workers_die_past_the_restart_limit(
    tmp_path: Path,
) -> None:
    """A worker that dies after booting is replaced ``[web] worker_restarts_per_minute``
    times in 60 s; the next death stops the web and the engine cleanly, exit 1."""
    with FakeOpenAI() as llm:
        env = {**_env(llm, tmp_path), "AGENTIK_WEB_WORKER_RESTARTS_PER_MINUTE": "2"}
        serve, base = _healthy_serve(env, tmp_path)
        pid = serve.popen.pid
        try:
            _kill_each_worker(serve, lambda: _web_workers(pid), lambda: _healthy(base), 3)
        finally:
            code = serve.stop()
    log = serve.log()
    assert code == 1, log
    assert log.count("(signal 9); starting another") == 2, log
    assert f"agentik: stopping: {CRASH_LOOP}" in log
    assert "engine stopped" in log
    assert "Traceback" not in log
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{base}/health", timeout=2.0)


def test_web_stops_with_exit_1_when_its_workers_die_past_the_restart_limit(
    tmp_path: Path,
) -> None:
    """gunicorn's master would restart them forever; its ``pre_fork`` hook stops it."""
    env = _web_env(tmp_path, AGENTIK_WEB_WORKER_RESTARTS_PER_MINUTE="2")
    web = Process("web", [sys.executable, "-m", "agentik.cli", "web"], env, tmp_path)
    try:
        base = f"http://127.0.0.1:{web.wait_for_log(GUNICORN_LISTENING)}"
        master = web.popen.pid
        _kill_each_worker(web, lambda: _children(master), lambda: _facade_answers(base), 3)
    finally:
        code = web.stop()
    log = web.log()
    assert code == 1, log
    assert f"Reason: {CRASH_LOOP}" in log
    assert "Traceback" not in log


def test_the_web_workers_stop_when_the_serve_process_is_killed(tmp_path: Path) -> None:
    """kill -9 of ``serve`` (the engine) leaves no web worker behind answering for a dead
    engine: each asked for SIGTERM when its parent dies (``agentik.parent_watch``)."""
    with FakeOpenAI() as llm:
        serve, base = _healthy_serve(_env(llm, tmp_path), tmp_path)
        try:
            workers = _web_workers(serve.popen.pid)
            assert workers
            serve.popen.kill()
            serve.popen.wait(WAIT)
            wait_for(
                lambda: not any(Path(f"/proc/{pid}").exists() for pid in workers),
                "the web workers to exit",
            )
        finally:
            serve.stop()
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{base}/health", timeout=2.0)


def test_web_refuses_a_bad_setting_with_a_message_that_names_it(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "AGENTIK_WEB_THREADS": "many"}
    env.pop("AGENTIK_CONFIG", None)
    done = subprocess.run(
        [sys.executable, "-m", "agentik.cli", "web"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        timeout=WAIT,
    )
    assert done.returncode == 2
    assert b"AGENTIK_WEB_THREADS" in done.stderr


MCP_NEEDING_A_SECRET = """
[[mcp.servers]]
name = "secret"
command = "mcp-secret"
env = { TOKEN = "${AGENTIK_TEST_UNSET_MCP_TOKEN}" }
"""


def _web_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "AGENTIK_HTTP_ADDR": "127.0.0.1:0",
        # Nothing listens here: /health answers 503 with the facade itself "ok".
        "AGENTIK_ENGINE_TARGET": f"127.0.0.1:{free_port()}",
        "AGENTIK_WEB_WORKERS": "1",
        "AGENTIK_WEB_THREADS": "2",
        **extra,
    }
    env.pop("AGENTIK_CONFIG", None)
    env.pop("AGENTIK_TEST_UNSET_MCP_TOKEN", None)
    return env


def _facade_answers(base: str) -> bool:
    try:
        reply = httpx.get(f"{base}/health", timeout=2.0)
    except httpx.TransportError:
        return False
    return reply.status_code == 503 and reply.json()["facade"] == "ok"


def test_web_starts_with_an_mcp_server_whose_variable_only_the_engine_has(
    tmp_path: Path,
) -> None:
    config = tmp_path / "agentik.toml"
    config.write_text(MCP_NEEDING_A_SECRET)
    argv = [sys.executable, "-m", "agentik.cli", "--config", str(config), "web"]
    web = Process("web", argv, _web_env(tmp_path), tmp_path)
    try:
        base = f"http://127.0.0.1:{web.wait_for_log(GUNICORN_LISTENING)}"
        wait_for(lambda: _facade_answers(base), "the facade to answer")
    finally:
        code = web.stop()
    assert code == 0, web.log()
    assert "AGENTIK_TEST_UNSET_MCP_TOKEN" not in web.log()


def test_serve_refuses_an_mcp_server_whose_variable_is_unset(tmp_path: Path) -> None:
    config = tmp_path / "agentik.toml"
    config.write_text(MCP_NEEDING_A_SECRET)
    done = subprocess.run(
        [sys.executable, "-m", "agentik.cli", "--config", str(config), "serve"],
        env=_web_env(tmp_path),
        cwd=ROOT,
        capture_output=True,
        timeout=WAIT,
    )
    assert done.returncode == 2
    assert b"'AGENTIK_TEST_UNSET_MCP_TOKEN', which is unset" in done.stderr


def test_the_web_process_does_not_import_the_engine_tools(tmp_path: Path) -> None:
    probe = (
        "import sys\n"
        "import web_facade.gunicorn_conf\n"
        "from web_facade import create_app\n"
        "create_app()\n"
        "print(sorted(m for m in sys.modules if m.startswith('engine_service.tools')))\n"
    )
    config = tmp_path / "agentik.toml"
    config.write_text(MCP_NEEDING_A_SECRET)
    done = subprocess.run(
        [sys.executable, "-c", probe],
        env=_web_env(tmp_path, AGENTIK_CONFIG=str(config)),
        cwd=ROOT,
        capture_output=True,
        timeout=WAIT,
        check=True,
    )
    assert done.stdout.decode().strip() == "[]", done.stderr.decode()


def test_two_facades_on_one_host_start_side_by_side_without_a_control_socket(
    tmp_path: Path,
) -> None:
    home, runtime = tmp_path / "home", tmp_path / "run"
    home.mkdir()
    runtime.mkdir()
    env = _web_env(tmp_path, HOME=str(home), XDG_RUNTIME_DIR=str(runtime))
    argv = [sys.executable, "-m", "agentik.cli", "web"]
    webs = [Process(f"web{n}", argv, env, tmp_path) for n in (1, 2)]
    try:
        bases = [f"http://127.0.0.1:{web.wait_for_log(GUNICORN_LISTENING)}" for web in webs]
        assert bases[0] != bases[1]
        for base in bases:
            wait_for(lambda: _facade_answers(base), f"the facade at {base} to answer")  # noqa: B023
        assert not [*home.rglob("*.ctl"), *runtime.rglob("*.ctl")]
    finally:
        codes = [web.stop() for web in webs]
    assert codes == [0, 0], [web.log() for web in webs]
    for web in webs:
        assert "control socket" not in web.log().lower(), web.log()


def test_a_second_ctrl_c_stops_a_run_in_flight_now_and_keeps_its_answer(tmp_path: Path) -> None:
    import re
    import time

    with FakeOpenAI() as llm:
        env = {**_env(llm, tmp_path), "AGENTIK_SHUTDOWN_GRACE": "60"}
        argv = [sys.executable, "-m", "agentik.cli", "serve"]
        serve = Process("serve", argv, env, tmp_path)
        try:
            base = f"http://127.0.0.1:{serve.wait_for_log(GUNICORN_LISTENING)}"
            wait_for(lambda: _healthy(base), "serve to be healthy")
            conversation = httpx.post(f"{base}/agentik/conversations", json={}, timeout=WAIT)
            conversation_id = conversation.json()["id"]
            body = {"content": [{"type": "text", "text": "[[chunks:5000]][[slow:0.01]] long"}]}
            with httpx.stream(
                "POST",
                f"{base}/agentik/conversations/{conversation_id}/send",
                json=body,
                timeout=WAIT,
            ) as stream:
                for line in stream.iter_lines():
                    if line == "event: append_text":
                        break  # the run is streaming
            serve.popen.send_signal(signal.SIGINT)
            # Says that streams end at once, and what becomes of the runs.
            said = (
                "agentik: stopping: the web first, so open streams end now (clients pick the "
                "turns up again from /events); runs in flight get up to 60s to finish and are "
                "stored, interrupted if they do not (press Ctrl-C again to stop them now)"
            )
            serve.wait_for_log(re.compile(f"({re.escape(said)})"))
            serve.wait_for_log(re.compile(r"(waiting up to 60s for 1 runs in flight)"))
            asked = time.monotonic()
            serve.popen.send_signal(signal.SIGINT)
            serve.popen.wait(WAIT)
            took = time.monotonic() - asked
        finally:
            serve.stop()
    assert took < 10, f"took {took:.1f} s with a 60 s grace:\n{serve.log()}"
    assert "stopping now: 1 runs in flight interrupted" in serve.log()
    assert "Traceback" not in serve.log()
    # The partial answer was kept: a new engine on the same file finds it.
    from engine_service.core.models import MessageStatus
    from engine_service.stores.sqlite import SqliteSessionStore

    async def stored() -> list[object]:
        store = SqliteSessionStore(tmp_path / "agentik.db")
        try:
            messages = await store.all_messages(conversation_id)
        finally:
            await store.close()
        return [m.status for m in messages]

    import asyncio

    assert asyncio.run(stored())[-1] == MessageStatus.INTERRUPTED


def test_a_local_start_says_nothing_about_the_public_url(tmp_path: Path) -> None:
    with FakeOpenAI() as llm:
        argv = [sys.executable, "-m", "agentik.cli", "serve"]
        env = {**_env(llm, tmp_path), "AGENTIK_WEB_WORKERS": "2"}
        serve = Process("serve", argv, env, tmp_path)
        try:
            base = f"http://127.0.0.1:{serve.wait_for_log(GUNICORN_LISTENING)}"
            wait_for(lambda: _healthy(base), "serve to be healthy")
            card = httpx.get(f"{base}/.well-known/agent-card.json", timeout=WAIT)
            assert card.status_code == 200
        finally:
            serve.stop()
    assert "AGENTIK_PUBLIC_URL" not in serve.log()
    # The start-up lines say which LLM endpoint the engine talks to.
    assert f"LLM: openai:gpt-4o-mini at {llm.base_url}" in serve.log()
