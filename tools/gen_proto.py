"""Generate the gRPC stubs of the public contract: ``make proto`` runs this, and the drift test too.

Why a script and not one ``protoc`` line: the descriptor a server reflects (grpcurl ``describe``,
``FileContainingSymbol``, ``FileByFilename``) is named after the path protoc was given, and the
Python modules are placed and imported after that same path. We want the two apart:

- the descriptor named by the contract's public path, ``agentik/engine/v1/engine.proto`` (what
  clients compile against, what ``buf`` and the docs name);
- the modules importable as ``agentik.rpc.agentik.engine.v1.engine_pb2`` /
  ``engine_pb2_grpc``, as every import in the codebase is (inside the shared package, under
  ``agentik.rpc``, apart from the code we write by hand).

``-Iagentik/rpc=proto`` gives the second but names the descriptor
``agentik/rpc/agentik/engine/v1/engine.proto``. So: generate with ``-Iproto`` into a
temporary directory, then rewrite the few places that name the Python module (listed in
``REWRITES``; each must match exactly once, so a change in the generators' output fails here
instead of producing stubs that import a package that does not exist).

Usage: ``python tools/gen_proto.py [OUT]``; the stubs are written under
``OUT/agentik/rpc/agentik/engine/v1`` (OUT defaults to the repository).
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROTO_ROOT = "proto"
PROTO = "agentik/engine/v1/engine.proto"
PREFIX = "agentik.rpc."
GENERATED = Path("agentik/rpc") / Path(PROTO).parent
FILES = ("engine_pb2.py", "engine_pb2.pyi", "engine_pb2_grpc.py", "engine_pb2_grpc.pyi")

_MODULE = re.escape("agentik.engine.v1")
# The one import of the message module, in the gRPC module and its type stub.
_IMPORT = (
    rf"(?m)^from ({_MODULE}) import engine_pb2 as ",
    rf"from {PREFIX}\1 import engine_pb2 as ",
)
REWRITES: dict[str, tuple[tuple[str, str], ...]] = {
    # The module name the message classes record as their __module__ (repr, pickling).
    "engine_pb2.py": ((rf"'({_MODULE}\.engine_pb2)'", rf"'{PREFIX}\1'"),),
    "engine_pb2_grpc.py": (
        _IMPORT,
        (r"generated code in (agentik/engine/v1/)", r"generated code in agentik/rpc/\1"),
    ),
    "engine_pb2_grpc.pyi": (_IMPORT,),
}
_LEFT_OVER = re.compile(rf"(?m)^\s*(from|import) {_MODULE}\b")


def protoc_command(out: Path) -> list[str]:
    """The protoc run, with the mypy-protobuf plugins of this interpreter's environment."""
    bin_dir = Path(sys.executable).parent
    plugins = {name: bin_dir / f"protoc-gen-{name}" for name in ("mypy", "mypy_grpc")}
    missing = [str(path) for path in plugins.values() if not path.exists()]
    if missing:
        raise SystemExit(f"mypy-protobuf plugins missing (install the dev extras): {missing}")
    return [
        sys.executable,
        "-m",
        "grpc_tools.protoc",
        f"-I{PROTO_ROOT}",
        *(f"--plugin=protoc-gen-{name}={path}" for name, path in plugins.items()),
        f"--python_out={out}",
        f"--grpc_python_out={out}",
        f"--mypy_out={out}",
        f"--mypy_grpc_out={out}",
        f"{PROTO_ROOT}/{PROTO}",
    ]


def rewrite(name: str, text: str) -> str:
    """Point one generated file's module references into ``agentik.rpc``."""
    for pattern, replacement in REWRITES.get(name, ()):
        text, count = re.subn(pattern, replacement, text)
        if count != 1:
            raise SystemExit(f"{name}: expected one match of {pattern!r}, found {count}")
    if left := _LEFT_OVER.search(text):
        raise SystemExit(f"{name}: still imports the bare package: {left.group(0).strip()!r}")
    return text


def generate(out: Path = ROOT) -> list[Path]:
    """Write the four stub files under ``out / GENERATED``; returns their paths."""
    target = out / GENERATED
    target.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    with tempfile.TemporaryDirectory(prefix="agentik-proto-") as tmp:
        result = subprocess.run(
            protoc_command(Path(tmp)), cwd=ROOT, capture_output=True, text=True, timeout=120
        )
        if result.returncode != 0:
            raise SystemExit(f"protoc failed:\n{result.stdout}{result.stderr}")
        for name in FILES:
            text = (Path(tmp) / Path(PROTO).parent / name).read_text()
            path = target / name
            path.write_text(rewrite(name, text))
            written.append(path)
    return written


def main(argv: list[str]) -> None:
    out = Path(argv[0]).resolve() if argv else ROOT
    for path in generate(out):
        print(f"wrote {path}")


if __name__ == "__main__":
    main(sys.argv[1:])
