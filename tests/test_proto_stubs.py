"""The committed gRPC stubs are exactly what `make proto` generates from the .proto."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GENERATED = Path("engine_service/rpc/agentik/engine/v1")
FILES = ("engine_pb2.py", "engine_pb2.pyi", "engine_pb2_grpc.py", "engine_pb2_grpc.pyi")


def test_committed_stubs_match_the_proto(tmp_path: Path) -> None:
    bin_dir = Path(sys.executable).parent
    plugins = {name: bin_dir / f"protoc-gen-{name}" for name in ("mypy", "mypy_grpc")}
    missing = [str(p) for p in plugins.values() if not p.exists()]
    if missing:
        pytest.fail(f"mypy-protobuf plugins missing (install the dev extras): {missing}")
    command = [
        sys.executable,
        "-m",
        "grpc_tools.protoc",
        "-Iengine_service/rpc=proto",
        *(f"--plugin=protoc-gen-{name}={path}" for name, path in plugins.items()),
        f"--python_out={tmp_path}",
        f"--grpc_python_out={tmp_path}",
        f"--mypy_out={tmp_path}",
        f"--mypy_grpc_out={tmp_path}",
        "engine_service/rpc/agentik/engine/v1/engine.proto",
    ]
    subprocess.run(command, cwd=ROOT, check=True, capture_output=True, timeout=60)
    for name in FILES:
        fresh = (tmp_path / GENERATED / name).read_text()
        committed = (ROOT / GENERATED / name).read_text()
        assert fresh == committed, f"{GENERATED / name} drifted from the .proto: run `make proto`"


def test_the_proto_is_lint_clean() -> None:
    buf = shutil.which("buf", path=str(Path(sys.executable).parent))
    if buf is None:
        pytest.fail("buf is missing (install the dev extras: buf-bin)")
    result = subprocess.run([buf, "lint"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
