"""One engine per SQLite file: a second engine process on the file is refused at start,
naming the file and the engine that serves it; ``agentik migrate`` and ``agentik doctor``
still open it; the file is free again once the first engine is gone (``kill -9`` too)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import grpc
import pytest

from agentik.config import ConfigError
from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from agentik.rpc.agentik.engine.v1 import engine_pb2_grpc as pb_grpc
from engine_service.store_lock import lock_store
from tests.stack import ENGINE_LISTENING, ROOT, WAIT, Process

STARTUP = 60.0
"""Upper bound for an engine process to start and exit, in seconds (a busy host)."""


def _env(store: str) -> dict[str, str]:
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith(("AGENTIK_", "OPENAI_"))},
        "PYTHONPATH": str(ROOT),
        "AGENTIK_GRPC_ADDR": "127.0.0.1:0",
        "AGENTIK_STORE": store,
        "AGENTIK_SHUTDOWN_GRACE": "1",
        "AGENTIK_LOG_LEVEL": "INFO",
    }


def _engine(store: str, logs: Path, name: str) -> tuple[Process, str]:
    """An engine process serving ``store``, and its address once it listens."""
    process = Process(name, [sys.executable, "-m", "engine_service"], _env(store), logs)
    return process, f"127.0.0.1:{process.wait_for_log(ENGINE_LISTENING)}"


def _agentik(store: str, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentik.cli", *argv],
        cwd=ROOT,
        env=_env(store),
        capture_output=True,
        text=True,
        timeout=STARTUP,
        check=False,
    )


def _serves(target: str, session_id: str) -> None:
    with grpc.insecure_channel(target) as channel:
        stub = pb_grpc.AgentEngineStub(channel)
        stub.CreateSession(pb.CreateSessionRequest(session_id=session_id), timeout=WAIT)
        stub.GetSession(pb.GetSessionRequest(session_id=session_id), timeout=WAIT)


def test_a_second_engine_on_a_sqlite_file_is_refused_naming_the_file_and_the_first(
    tmp_path: Path,
) -> None:
    database = tmp_path / "data" / "agentik.db"
    store = f"sqlite:///{database}"
    first, target = _engine(store, tmp_path, "first")
    try:
        second = _agentik(store, "engine")

        assert second.returncode == 2, second.stderr
        said = second.stderr
        assert "agentik: configuration error: the SQLite store" in said, said
        assert str(database) in said and f"pid {first.popen.pid}" in said, said
        assert "engine listening" not in said
        _serves(target, "still-first")  # the first engine serves on, undisturbed
        # The lock is the engine's, not the store's: operators' commands still open it.
        migrated = _agentik(store, "migrate")
        assert migrated.returncode == 0, migrated.stderr
        doctor = _agentik(store, "doctor")
        assert f"ok    store   {store}" in doctor.stdout, doctor.stdout + doctor.stderr
    finally:
        first.stop(signal.SIGKILL)

    # Killed, the first engine let go of the file: the next one takes it, and its data.
    after, target = _engine(store, tmp_path, "after")
    try:
        _serves(target, "after-the-first")
        with grpc.insecure_channel(target) as channel:
            stub = pb_grpc.AgentEngineStub(channel)
            kept = stub.GetSession(pb.GetSessionRequest(session_id="still-first"), timeout=WAIT)
        assert kept.id == "still-first"
    finally:
        assert after.stop() == 0


def test_the_lock_is_taken_once_per_file_and_let_go_on_release(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'one.db'}"
    held = lock_store(store)
    assert held is not None and held.path == tmp_path / "one.db.lock"
    with pytest.raises(ConfigError, match=rf"in use by another engine \(pid {os.getpid()}\)"):
        lock_store(store)  # flock: another open file description of the same file
    assert lock_store(f"sqlite:///{tmp_path / 'two.db'}") is not None
    held.release()
    again = lock_store(store)
    assert again is not None
    again.release()


@pytest.mark.parametrize("url", ["memory://", "sqlite:///:memory:", "postgresql://db/agentik"])
def test_stores_that_are_not_a_sqlite_file_take_no_lock(url: str) -> None:
    assert lock_store(url) is None
