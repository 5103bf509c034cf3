"""The committed gRPC stubs are exactly what `make proto` generates from the .proto."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GENERATED = Path("agentik/rpc/agentik/engine/v1")
FILES = ("engine_pb2.py", "engine_pb2.pyi", "engine_pb2_grpc.py", "engine_pb2_grpc.pyi")


def test_committed_stubs_match_the_proto(tmp_path: Path) -> None:
    """Runs the very script `make proto` runs (tools/gen_proto.py), into a scratch directory."""
    command = [sys.executable, "tools/gen_proto.py", str(tmp_path)]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    for name in FILES:
        fresh = (tmp_path / GENERATED / name).read_text()
        committed = (ROOT / GENERATED / name).read_text()
        assert fresh == committed, f"{GENERATED / name} drifted from the .proto: run `make proto`"


def test_the_descriptor_has_the_public_path_and_the_modules_stay_in_agentik_rpc() -> None:
    """Clients see the contract's public path; the code imports it from agentik.rpc.

    a2a-sdk registers its own files (``a2a.proto``, ``a2a_v0_3.proto``) in the same default
    pool: loading them next to ours must clash on neither a file name nor a symbol.
    """
    from a2a.compat.v0_3 import a2a_v0_3_pb2
    from a2a.types import a2a_pb2
    from google.protobuf import descriptor_pool

    from agentik.rpc.agentik.engine.v1 import engine_pb2, engine_pb2_grpc

    pool = descriptor_pool.Default()
    assert engine_pb2.DESCRIPTOR.name == "agentik/engine/v1/engine.proto"
    assert engine_pb2.DESCRIPTOR.package == "agentik.engine.v1"
    assert pool.FindFileByName("agentik/engine/v1/engine.proto") is engine_pb2.DESCRIPTOR
    symbol = pool.FindFileContainingSymbol("agentik.engine.v1.AgentEngine")
    assert symbol is engine_pb2.DESCRIPTOR
    with pytest.raises(KeyError):
        pool.FindFileByName("agentik/rpc/agentik/engine/v1/engine.proto")
    assert {a2a_pb2.DESCRIPTOR.name, a2a_v0_3_pb2.DESCRIPTOR.name}.isdisjoint(
        {engine_pb2.DESCRIPTOR.name}
    )
    assert engine_pb2.Session.__module__ == "agentik.rpc.agentik.engine.v1.engine_pb2"
    assert engine_pb2_grpc.AgentEngineStub.__module__.startswith("agentik.rpc.")
    assert "agentik.engine" not in sys.modules, "a generated import escaped agentik.rpc"


def test_the_proto_is_lint_clean() -> None:
    buf = shutil.which("buf", path=str(Path(sys.executable).parent))
    if buf is None:
        pytest.fail("buf is missing (install the dev extras: buf-bin)")
    result = subprocess.run([buf, "lint"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
