"""``core.kept_input``: what a run keeps of its request for a resume, and its bound."""

from __future__ import annotations

import pytest

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from engine_service.core.errors import InvalidInput
from engine_service.core.kept_input import KeptInput, keep, restore
from engine_service.core.models import (
    ClientTool,
    ContextItem,
    ResumeEntry,
    ResumeStatus,
    RunInput,
)
from tests.engine.harness import engine_settings, refused, running_engine, user


def _input(description: str = "Pick a colour") -> RunInput:
    return RunInput(
        "s",
        "r",
        tools=[ClientTool("pick_color", description, {"type": "object"})],
        context=[ContextItem("the page", "settings")],
        resume=[ResumeEntry("i1", ResumeStatus.RESOLVED, {"approved": True})],
    )


def test_the_tools_context_and_answers_come_back_as_they_were_kept() -> None:
    run_input = _input()
    kept = restore(keep(run_input, 10_000))
    assert kept == KeptInput(run_input.tools, run_input.context, run_input.resume, starts=True)


def test_a_run_with_none_of_them_keeps_only_that_its_starts_are_stored() -> None:
    assert restore(keep(RunInput("s", "r"), 100)) == KeptInput(starts=True)
    assert restore(keep(_input(), 10_000)).starts
    # A run begun by an engine from before kept nothing: its calls' starts were not stored.
    assert restore("") == KeptInput(starts=False)
    assert restore('{"tools": 3}') == KeptInput()


def test_more_than_the_limit_is_refused_naming_the_setting() -> None:
    with pytest.raises(InvalidInput) as caught:
        keep(_input("x" * 500), 400)
    assert "max_event_bytes" in caught.value.message
    assert "keeps at most 400" in caught.value.message


async def test_a_run_whose_client_tools_pass_the_bound_is_refused_before_it_starts() -> None:
    settings = engine_settings(AGENTIK_MAX_EVENT_BYTES="65536")
    async with running_engine(settings) as harness:
        tool = pb.Tool(name="big", description="x" * 70_000)
        details = await refused(
            harness,
            pb.RunRequest(session_id="s", create_session=True, messages=[user("hi")], tools=[tool]),
        )
    assert "client tools, context, resume entries and webhook URL take" in details
    assert "max_event_bytes" in details
