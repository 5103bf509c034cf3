"""The tools a client offers with a run follow the LLM's name rule, once each."""

from __future__ import annotations

import pytest

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from tests.engine.harness import Harness, kinds, refused, run, user


def _offering(*names: str) -> pb.RunRequest:
    return pb.RunRequest(
        session_id="tools",
        create_session=True,
        messages=[user("hi")],
        tools=[pb.Tool(name=name, description="a client tool") for name in names],
    )


@pytest.mark.parametrize(
    ("names", "expected"),
    [
        (("lookup", "lookup"), "tools[1].name 'lookup' is already offered by tools[0]"),
        (("has space",), "tools[0].name 'has space' is not a valid tool name"),
        (("ok", "dotted.name"), "tools[1].name 'dotted.name' is not a valid tool name"),
        (("x" * 65,), "tools[0].name 'xxxxxxxx"),
        (("nul\x00",), "tools[0].name 'nul\\x00' is not a valid tool name"),
        (("",), "tools[0].name is required"),
        (("calculate",), "tools[0].name 'calculate' collides with an engine tool"),
    ],
)
async def test_a_duplicate_or_invalid_client_tool_name_is_invalid_argument_naming_the_tool(
    harness: Harness, names: tuple[str, ...], expected: str
) -> None:
    details = await refused(harness, _offering(*names))

    assert details.startswith(expected), details
    assert len(details) < 300
    assert (await harness.stub.ListSessions(pb.ListSessionsRequest())).total == 0


async def test_more_client_tools_than_an_llm_takes_are_refused(harness: Harness) -> None:
    details = await refused(harness, _offering(*(f"t{i}" for i in range(129))))

    assert details == "tools: 129 tools offered; a run takes 128"


async def test_client_tools_within_the_rule_are_offered(harness: Harness) -> None:
    events = await run(harness, _offering("lookup-1", "Find_Thing", "z" * 64))

    assert kinds(events)[-1] == "run_finished"
