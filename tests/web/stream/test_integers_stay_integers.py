"""Numbers the engine carries in protobuf ``Value``s reach every protocol as written.

``google.protobuf.Value`` holds every number as a double, so a naive conversion sends
``{"count": 1}`` as ``{"count": 1.0}``; a client comparing state or tool progress with
``===`` then sees a change that did not happen. Checked on the wire bytes, since
``1 == 1.0`` in Python.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from ag_ui.encoder import EventEncoder
from google.protobuf import json_format, struct_pb2

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from web_facade.agentik.events import event_frame
from web_facade.agui.events import to_agui


def _struct(value: dict[str, Any]) -> struct_pb2.Struct:
    return json_format.ParseDict(value, struct_pb2.Struct())


def _list(value: list[dict[str, Any]]) -> struct_pb2.ListValue:
    out = struct_pb2.ListValue()
    out.extend(_struct(item) for item in value)
    return out


def _events() -> list[pb.Event]:
    patch = [{"op": "replace", "path": "/count", "value": 1}]
    return [
        pb.Event(
            state_snapshot=pb.StateSnapshot(
                snapshot=struct_pb2.Value(struct_value=_struct({"count": 1, "ratio": 0.5}))
            )
        ),
        pb.Event(state_delta=pb.StateDelta(delta=_list(patch))),
        pb.Event(
            custom=pb.Custom(
                name="tool_progress",
                value=struct_pb2.Value(struct_value=_struct({"progress": 1, "total": 3})),
            )
        ),
        pb.Event(
            run_finished=pb.RunFinished(
                result=struct_pb2.Value(struct_value=_struct({"count": 1})),
                usage=pb.Usage(input_tokens=1, output_tokens=1, total_tokens=2),
            )
        ),
        pb.Event(tool_call_args=pb.ToolCallArgs(tool_call_id="c1", delta='{"count": 1}')),
    ]


def _agentik(event: pb.Event) -> bytes:
    frame = event_frame(event)
    assert frame is not None
    return frame


def _agui(event: pb.Event) -> bytes:
    converted = to_agui(event)
    assert converted is not None
    return EventEncoder().encode(converted).encode()


def _numbers(wire: bytes) -> list[object]:
    """Every number in the frame's JSON, as Python reads it from the wire."""
    found: list[object] = []

    def walk(value: object) -> None:
        if isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)
        elif isinstance(value, int | float) and not isinstance(value, bool):
            found.append(value)

    data = wire.decode().split("data: ", 1)[1]
    walk(json.loads(data))
    return found


@pytest.mark.parametrize("encode", [_agentik, _agui], ids=["agentik", "agui"])
@pytest.mark.parametrize("event", _events(), ids=lambda e: e.WhichOneof("kind"))
def test_whole_numbers_in_state_progress_results_and_usage_are_sent_as_integers(
    encode: Callable[[pb.Event], bytes], event: pb.Event
) -> None:
    wire = encode(event)

    assert b"1.0" not in wire, wire
    numbers = [n for n in _numbers(wire) if n not in (0, 0.5)]
    assert all(isinstance(n, int) for n in numbers), wire


def test_a_tool_calls_arguments_pass_through_as_the_model_wrote_them() -> None:
    event = pb.Event(tool_call_args=pb.ToolCallArgs(tool_call_id="c1", delta='{"count": 1}'))

    assert b'"delta":"{\\"count\\": 1}"' in _agentik(event)
    assert b'"delta":"{\\"count\\": 1}"' in _agui(event)
