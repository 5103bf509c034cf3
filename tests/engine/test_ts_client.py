"""A TypeScript client from generated stubs (protoc-gen-es, Connect's gRPC transport)
typechecks and runs a turn, then resumes the session with Subscribe(after_seq).

The stubs are generated the way docs/clients.md says, with buf and the TypeScript plugin of
buf.gen.yaml, offline (buf from PyPI, the plugin from npm); tsc checks and compiles the
client, node runs it.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

from tests.engine.harness import WAIT, Harness
from tests.node_tools import NODE_DIR, node_or_skip

ROOT = Path(__file__).resolve().parents[2]
BUF = Path(sys.executable).parent / "buf"
ES_PLUGIN = """\
  - local: protoc-gen-es
    out: gen/ts
    opt: [target=ts, import_extension=js]
"""
"""The TypeScript entry of buf.gen.yaml, which this test generates with."""
TSCONFIG = {
    "compilerOptions": {
        "target": "es2022",
        "module": "nodenext",
        "moduleResolution": "nodenext",
        "strict": True,
        "skipLibCheck": True,
        "outDir": "out",
        "types": ["node"],
    },
    "files": ["ts_client.ts"],
}


async def check(*argv: str, cwd: Path, env: dict[str, str] | None = None) -> str:
    """Run a command to its end (bounded); its output, failing with it on a non-zero exit."""
    process = await asyncio.create_subprocess_exec(
        *argv,
        cwd=cwd,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    async with asyncio.timeout(WAIT * 6):
        out, _ = await process.communicate()
    text = out.decode(errors="replace")
    assert process.returncode == 0, f"{argv[0]} {argv[1:3]} exited {process.returncode}:\n{text}"
    return text


async def build_client(work: Path) -> Path:
    """Generate the stubs, typecheck and compile the client: the compiled entry point."""
    assert ES_PLUGIN in (ROOT / "buf.gen.yaml").read_text(), "buf.gen.yaml's TS entry changed"
    template = {
        "version": "v2",
        "inputs": [{"directory": str(ROOT / "proto")}],
        "plugins": [
            {"local": "protoc-gen-es", "out": "gen", "opt": ["target=ts", "import_extension=js"]}
        ],
    }
    bin_dir = NODE_DIR / "node_modules" / ".bin"
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    await check(str(BUF), "generate", "--template", json.dumps(template), cwd=work, env=env)
    assert (work / "gen/agentik/engine/v1/engine_pb.ts").exists()
    (work / "ts_client.ts").write_text((NODE_DIR / "ts_client.ts").read_text())
    (work / "tsconfig.json").write_text(json.dumps(TSCONFIG))
    (work / "package.json").write_text('{"type": "module"}')
    (work / "node_modules").symlink_to(NODE_DIR / "node_modules")
    await check(str(bin_dir / "tsc"), "-p", str(work), cwd=work)
    return work / "out" / "ts_client.js"


async def test_a_typescript_client_from_generated_stubs_runs_a_turn_and_resumes_it(
    harness: Harness, tmp_path: Path
) -> None:
    node = node_or_skip("@connectrpc/connect-node")
    entry = await build_client(tmp_path)
    out = await check(node, str(entry), harness.target, "from-ts", "hello from ts", cwd=tmp_path)
    summary = json.loads(out.strip().splitlines()[-1])

    assert summary["kinds"][0] == "runStarted"
    assert summary["kinds"][-1] == "runFinished"
    assert summary["outcome"] == "SUCCESS"
    assert summary["text"] == "Echo: hello from ts"
    seqs = summary["seqs"]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
    after = summary["after"]
    assert after == seqs[2]
    assert summary["resumedSeqs"] == [seq for seq in seqs if seq > after]
    assert summary["notFound"] == "NotFound"
