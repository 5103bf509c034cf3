"""A2A: an answer cut by a dead engine and asked again (``[engine] resume_runs``) reaches
the client as a WORKING status update naming the cut artifact; the new answer is a new
artifact, and the task completes once."""

from __future__ import annotations

from typing import Any

from a2a.types import Task, TaskState
from google.protobuf import struct_pb2

from agentik.a2a.convert import SUPERSEDED, RunStream
from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb


def _event(seq: int, body: dict[str, Any]) -> pb.Event:
    return pb.Event(seq=seq, session_id="s", run_id="r1", **body)


def test_a_superseded_answer_is_a_working_status_update_and_the_new_answer_a_new_artifact() -> None:
    value = struct_pb2.Value()
    value.struct_value.update({"messageId": "cut", "reason": "the engine stopped"})
    stream = RunStream(Task(id="r1", context_id="s"), "r1", announce=False)
    out = []
    bodies: list[dict[str, Any]] = [
        {"text_message_start": pb.TextMessageStart(message_id="cut")},
        {"text_message_content": pb.TextMessageContent(message_id="cut", delta="hal")},
        {"text_message_end": pb.TextMessageEnd(message_id="cut")},
        {"custom": pb.Custom(name="superseded", value=value)},
        {"text_message_start": pb.TextMessageStart(message_id="new")},
        {"text_message_content": pb.TextMessageContent(message_id="new", delta="whole")},
        {"text_message_end": pb.TextMessageEnd(message_id="new")},
        {"run_finished": pb.RunFinished(outcome=pb.OUTCOME_TYPE_SUCCESS)},
    ]
    for seq, body in enumerate(bodies, start=1):
        out += stream.feed(_event(seq, body))
    kinds = [r.WhichOneof("payload") for r in out]
    assert kinds == [
        "artifact_update",
        "artifact_update",
        "status_update",
        "artifact_update",
        "artifact_update",
        "status_update",
    ]
    superseded = out[2].status_update
    assert superseded.status.state == TaskState.TASK_STATE_WORKING
    assert superseded.status.message.metadata[SUPERSEDED] == "cut"
    assert superseded.status.message.parts[0].text == "the engine stopped"
    assert out[1].artifact_update.artifact.artifact_id == "cut"
    assert out[1].artifact_update.last_chunk
    fresh = out[3].artifact_update
    assert fresh.artifact.artifact_id == "new" and not fresh.append
    assert out[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
