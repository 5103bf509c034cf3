"""A compaction is visible on the surfaces that render events themselves: A2A's status
update metadata and ``agentik chat``'s dim line (``/agentik`` and the chat page:
tests/web/agentik/test_events.py and tests/node; gRPC and AG-UI pass CUSTOM on as is)."""

from __future__ import annotations

import io

from a2a.types import Task, TaskState
from google.protobuf import struct_pb2

from agentik.a2a.convert import RunStream
from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from agentik_chat.api import Event
from agentik_chat.render import Renderer

VALUE: dict[str, str | int] = {
    "mode": "summarize",
    "covered": 40,
    "through_message_id": "m39",
    "tokens_before": 3100,
    "tokens_after": 900,
    "summary_tokens": 12,
    "summary": "They talked about cats.",
}


def compacted_event() -> pb.Event:
    value = struct_pb2.Value()
    value.struct_value.update(VALUE)
    return pb.Event(seq=5, run_id="r1", custom=pb.Custom(name="compacted", value=value))


def test_a2a_tells_of_a_compaction_in_a_status_update_of_the_working_task() -> None:
    task = Task(id="t1", context_id="c1")
    task.status.state = TaskState.TASK_STATE_WORKING
    stream = RunStream(task, "r1", announce=False)

    (response,) = stream.feed(compacted_event())

    update = response.status_update
    assert (update.task_id, update.status.state) == ("t1", TaskState.TASK_STATE_WORKING)
    said = update.metadata["agentik_compacted"]
    assert isinstance(said, struct_pb2.Struct)
    assert said["mode"] == "summarize" and said["covered"] == 40
    assert said["summary"] == "They talked about cats."
    other = pb.Event(seq=6, run_id="r1", custom=pb.Custom(name="tool_progress"))
    assert stream.feed(other) == []


def test_agentik_chat_prints_a_dim_line_for_a_compaction() -> None:
    out = io.StringIO()
    renderer = Renderer(out, out, color=True)

    renderer.event(Event("compacted", dict(VALUE, type="compacted")))

    assert out.getvalue() == (
        "\x1b[2m[earlier messages summarised for the model: 40 messages, 3100 → 900 tokens]"
        "\n\x1b[0m"
    )
