"""A client in another language runs a turn from the .proto alone."""

from __future__ import annotations

import asyncio
import json

from tests.engine.harness import WAIT, Harness
from tests.node_tools import NODE_DIR, node_or_skip


async def test_a_node_grpc_client_runs_a_turn_from_the_proto_alone(harness: Harness) -> None:
    node = node_or_skip("@grpc/grpc-js")
    process = await asyncio.create_subprocess_exec(
        node,
        str(NODE_DIR / "grpc_run.mjs"),
        harness.target,
        "from-node",
        "hello from node",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(WAIT * 3):
        out, err = await process.communicate()
    assert process.returncode == 0, err.decode()
    summary = json.loads(out.decode().strip().splitlines()[-1])

    assert summary["kinds"][0] == "run_started"
    assert summary["kinds"][-1] == "run_finished"
    assert summary["seqs"] == list(range(1, len(summary["seqs"]) + 1))
    assert summary["text"] == "Echo: hello from node"
    assert summary["outcome"] == "OUTCOME_TYPE_SUCCESS"
    assert summary["roles"] == ["ROLE_USER", "ROLE_ASSISTANT"]
    assert summary["invalidArgumentCode"] == 3  # INVALID_ARGUMENT
