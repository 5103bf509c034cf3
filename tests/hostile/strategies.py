"""Hypothesis strategies for hostile ``agentik.engine.v1`` requests.

Each field draws from ordinary values, the ids and sessions that exist, and a pool of
hostile ones: huge strings (900 KB), NUL and control characters, right-to-left marks and
emoji, SQL and format strings, deep JSON (in Struct/Value fields, and as text where a field
holds JSON), numbers JSON cannot carry, negative and huge integers, unknown enum values,
invalid UTF-8 in bytes fields, and many repeated entries. Big values come from prebuilt pools,
so drawing them costs nothing.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from google.protobuf import json_format, struct_pb2
from hypothesis import strategies as st

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb

__all__ = [
    "REQUESTS",
    "credentials",
    "deep_bytes",
    "deep_value",
    "length_delimited",
    "raw_bytes",
    "runs_with_hostile_content",
]

HUGE = 900_000
INT32 = (-(2**31), -1, 0, 1, 100, 1000, 1001, 2**31 - 1)
INT64 = (-(2**63), -1, 0, 1, 2**31, 2**53 + 1, 2**63 - 1)

HOSTILE_TEXT = (
    "",
    " ",
    "\x00",
    "a\x00b",
    "\x01\x7f\x1b[2J",
    "\u202etxt.exe",
    "\ufeff\u200b",
    "\U0001f600" * 300,
    "x" * 129,
    "x" * 10_000,
    "y" * HUGE,
    "..",
    ".",
    "a/b",
    "../../etc/passwd",
    "%s%n%x{0}",
    "'; DROP TABLE sessions; --",
    "[" * 5000,
    '{"a":' * 2000,
    "null",
    "é" * 200,
)
HOSTILE_BYTES = (
    b"",
    b"\x00" * 64,
    b"\xff\xfe\xfd",
    b"\xc3\x28" * 100,
    b"\x89PNG\r\n" + b"\x00" * 200,
)


def text(known: tuple[str, ...] = ()) -> st.SearchStrategy[str]:
    return st.one_of(
        st.text(max_size=24),
        st.sampled_from(HOSTILE_TEXT),
        *([st.sampled_from(known)] if known else []),
    )


def ids(known: tuple[str, ...]) -> st.SearchStrategy[str]:
    return st.one_of(
        st.sampled_from(known),
        st.from_regex(r"[A-Za-z0-9._:~-]{1,40}", fullmatch=True),
        text(),
    )


def int32() -> st.SearchStrategy[int]:
    return st.one_of(st.sampled_from(INT32), st.integers(-(2**31), 2**31 - 1))


def int64() -> st.SearchStrategy[int]:
    return st.one_of(st.sampled_from(INT64), st.integers(-(2**63), 2**63 - 1))


def enum() -> st.SearchStrategy[int]:
    return st.one_of(st.integers(0, 6), st.sampled_from((-1, 99, 2**31 - 1)))


def deep_value(depth: int) -> struct_pb2.Value:
    """A list nested ``depth`` deep (protobuf parses 100 levels; each list is two)."""
    value = struct_pb2.Value(string_value="bottom")
    for _ in range(depth):
        outer = struct_pb2.Value()
        outer.list_value.values.add().CopyFrom(value)
        value = outer
    return value


def _varint(number: int) -> bytes:
    out = bytearray()
    while True:
        low, number = number & 0x7F, number >> 7
        out.append(low | (0x80 if number else 0))
        if not number:
            return bytes(out)


def length_delimited(field: int, payload: bytes) -> bytes:
    """Field ``field`` holding ``payload`` (a string, bytes or message), as protobuf encodes it."""
    return _varint(field << 3 | 2) + _varint(len(payload)) + payload


def deep_bytes(depth: int) -> bytes:
    """A serialized ``Value`` of lists nested ``depth`` deep, past what protobuf builds."""
    value = struct_pb2.Value(string_value="bottom").SerializeToString()
    for _ in range(depth):
        value = length_delimited(6, length_delimited(1, value))  # list_value.values
    return value


_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.integers(-(2**60), 2**60)
    | text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text(), inner, max_size=4),
    max_leaves=12,
)
_WIDE = struct_pb2.Value(
    struct_value=struct_pb2.Struct(
        fields={f"k{i}": struct_pb2.Value(number_value=i) for i in range(5_000)}
    )
)
_POOL_VALUES = (deep_value(20), deep_value(45), _WIDE)
"""45 lists deep is 90 levels, within the 100 protobuf parses with the message around it
(deeper only goes as raw bytes)."""


def _to_value(data: Any) -> struct_pb2.Value:
    out = struct_pb2.Value()
    if isinstance(data, float) and not math.isfinite(data):
        out.number_value = data
        return out
    try:
        json_format.ParseDict(data, out)
    except (json_format.ParseError, ValueError, TypeError):
        out.string_value = "unparsable"
    return out


def value() -> st.SearchStrategy[struct_pb2.Value]:
    return st.one_of(_JSON.map(_to_value), st.sampled_from(_POOL_VALUES))


def struct() -> st.SearchStrategy[struct_pb2.Struct]:
    def as_struct(v: struct_pb2.Value) -> struct_pb2.Struct:
        if v.HasField("struct_value"):
            return v.struct_value
        out = struct_pb2.Struct()
        out.fields["v"].CopyFrom(v)
        return out

    return value().map(as_struct)


REPEATED_BYTES = 2 << 20
"""How many bytes a repeated field's copies may add up to (the engine takes 4 MiB)."""


def _repeated(item: Any, times: int) -> list[Any]:
    return [item] * max(1, min(times, REPEATED_BYTES // (item.ByteSize() + 1)))


def many(item: st.SearchStrategy[Any], small: int = 3) -> st.SearchStrategy[list[Any]]:
    """A few entries, or one entry repeated hundreds or thousands of times (within
    :data:`REPEATED_BYTES`: building a bigger request only measures the client)."""
    repeated = st.tuples(item, st.sampled_from((300, 3000))).map(lambda pair: _repeated(*pair))
    return st.one_of(st.lists(item, max_size=small), repeated)


def _part() -> st.SearchStrategy[pb.ContentPart]:
    image = st.one_of(
        st.builds(lambda u, m: pb.ImagePart(url=u, mime_type=m), text(), text()),
        st.builds(
            lambda d, m: pb.ImagePart(data=d, mime_type=m),
            st.one_of(st.binary(max_size=32), st.sampled_from(HOSTILE_BYTES)),
            st.sampled_from(("", "image/png", "text/html", "x" * 300)),
        ),
        st.just(pb.ImagePart()),
    )
    return st.one_of(
        st.builds(lambda t: pb.ContentPart(text=pb.TextPart(text=t)), text()),
        image.map(lambda i: pb.ContentPart(image=i)),
        st.just(pb.ContentPart()),
    )


def _tool_call(known: tuple[str, ...]) -> st.SearchStrategy[pb.ToolCall]:
    return st.builds(pb.ToolCall, id=ids(known), name=text(), arguments=text())


def _message(known: tuple[str, ...]) -> st.SearchStrategy[pb.Message]:
    return st.builds(
        pb.Message,
        id=st.one_of(st.just(""), ids(known)),
        role=enum(),
        content=st.lists(_part(), max_size=3),
        tool_calls=st.lists(_tool_call(known), max_size=2),
        tool_call_id=st.one_of(st.just(""), ids(known)),
        status=enum(),
        name=text(),
    )


def _tool() -> st.SearchStrategy[pb.Tool]:
    return st.builds(
        pb.Tool, name=text(("client_tool", "calculate")), description=text(), parameters=struct()
    )


def _resume(known: tuple[str, ...]) -> st.SearchStrategy[pb.ResumeEntry]:
    def entry(interrupt_id: str, status: int, payload: struct_pb2.Value | None) -> pb.ResumeEntry:
        out = pb.ResumeEntry(interrupt_id=interrupt_id, status=status)  # type: ignore[arg-type]
        if payload is not None:
            out.payload.CopyFrom(payload)
        return out

    return st.builds(entry, ids(known), enum(), st.none() | value())


def _run(known: tuple[str, ...]) -> st.SearchStrategy[pb.RunRequest]:
    def build(fields: dict[str, Any], state: struct_pb2.Value | None) -> pb.RunRequest:
        request = pb.RunRequest(**fields)
        if state is not None:
            request.state.CopyFrom(state)
        return request

    fields = st.fixed_dictionaries(
        {
            "session_id": ids(known),
            "run_id": st.one_of(st.just(""), ids(known)),
            "messages": many(_message(known)),
            "tools": many(_tool()),
            "context": many(st.builds(pb.ContextItem, description=text(), value=text())),
            "forwarded_props": struct(),
            "reconcile": enum(),
            "create_session": st.booleans(),
            "cancel_on_disconnect": st.booleans(),
            "parent_run_id": st.one_of(st.just(""), ids(known)),
            "messages_snapshot": st.booleans(),
            "resume": many(_resume(known)),
        }
    )
    return st.builds(build, fields, st.none() | value())


def runs_with_hostile_content() -> st.SearchStrategy[pb.RunRequest]:
    """Runs the engine takes (a new session, a user's message) whose content is hostile:
    text, names, context, state and forwarded props from the pools above."""

    def build(
        session: str, texts: list[str], name: str, context: list[pb.ContextItem], state: Any
    ) -> pb.RunRequest:
        parts = [pb.ContentPart(text=pb.TextPart(text=t)) for t in texts]
        request = pb.RunRequest(
            session_id=session,
            create_session=True,
            messages=[pb.Message(role=pb.ROLE_USER, content=parts, name=name)],
            context=context,
        )
        if state is not None:
            request.state.CopyFrom(state)
        return request

    return st.builds(
        build,
        st.just("c"),  # the test gives each run a new conversation
        st.lists(text(), min_size=1, max_size=3),
        text(),
        st.lists(st.builds(pb.ContextItem, description=text(), value=text()), max_size=2),
        st.none() | value(),
    )


Requests = Callable[[tuple[str, ...]], st.SearchStrategy[Any]]

REQUESTS: dict[str, Requests] = {
    "Run": _run,
    "Interrupt": lambda k: st.builds(pb.InterruptRequest, session_id=ids(k), run_id=ids(k)),
    "Subscribe": lambda k: st.builds(
        pb.SubscribeRequest, session_id=ids(k), after_seq=int64(), until_idle=st.just(True)
    ),
    "CreateSession": lambda k: st.builds(
        pb.CreateSessionRequest, title=text(), session_id=st.one_of(st.just(""), ids(k))
    ),
    "GetSession": lambda k: st.builds(pb.GetSessionRequest, session_id=ids(k)),
    "ListSessions": lambda k: st.builds(pb.ListSessionsRequest, offset=int32(), limit=int32()),
    "RenameSession": lambda k: st.builds(pb.RenameSessionRequest, session_id=ids(k), title=text()),
    "DeleteSession": lambda k: st.builds(pb.DeleteSessionRequest, session_id=ids(k)),
    "ListMessages": lambda k: st.builds(
        pb.ListMessagesRequest,
        session_id=ids(k),
        after_message_id=st.one_of(st.just(""), ids(k)),
        limit=int32(),
        run_id=st.one_of(st.just(""), ids(k)),
    ),
    "GetRun": lambda k: st.builds(
        pb.GetRunRequest, run_id=ids(k), session_id=st.one_of(st.just(""), ids(k))
    ),
    "ListRuns": lambda k: st.builds(
        pb.ListRunsRequest, session_id=st.one_of(st.just(""), ids(k)), offset=int32(), limit=int32()
    ),
    "SetSessionWebhook": lambda k: st.builds(
        pb.SetSessionWebhookRequest,
        session_id=ids(k),
        webhook=st.builds(pb.Webhook, url=text()),
    ),
    "ListFailedWebhooks": lambda k: st.builds(
        pb.ListFailedWebhooksRequest, offset=int32(), limit=int32()
    ),
    "SetPushConfig": lambda k: st.builds(
        pb.SetPushConfigRequest,
        config=st.builds(
            pb.PushConfig,
            id=st.one_of(st.just(""), ids(k)),
            task_id=ids(k),
            url=text(),
            token=text(),
            auth_scheme=text(),
            auth_credentials=text(),
        ),
    ),
    "GetPushConfig": lambda k: st.builds(pb.GetPushConfigRequest, task_id=ids(k), id=ids(k)),
    "ListPushConfigs": lambda k: st.builds(pb.ListPushConfigsRequest, task_id=ids(k)),
    "DeletePushConfig": lambda k: st.builds(pb.DeletePushConfigRequest, task_id=ids(k), id=ids(k)),
}
"""RPC name → the strategy of its request, given the ids that exist."""


def credentials(good: tuple[str, ...]) -> st.SearchStrategy[str | None]:
    """An ``authorization`` value: a valid token most often, else a hostile one or none."""
    hostile = (
        None,
        "",
        "Bearer",
        "Bearer ",
        "Bearer not-a-token",
        "Basic YWxpY2U6dG9rZW4=",
        "Bearer " + "a" * 8000,
        "Bearer a.b.c",
        "Bearer eyJhbGciOiJub25lIn0.eyJzdWIiOiJhZG1pbiJ9.",
        "bearer  " + good[0][7:],
    )
    return st.one_of(st.sampled_from(good), st.sampled_from(good), st.sampled_from(hostile))


def raw_bytes() -> st.SearchStrategy[bytes]:
    """Bytes that may not parse as the method's message: garbage, bad UTF-8, deep nesting."""
    crafted = (
        b"\x0a\x03\xff\xfe\xfd",  # field 1 (a string in every request): not UTF-8
        b"\x0a\x05a\x00\xc3(b",
        b"\xff\xff\xff\xff",
        b"\x0a\xff\xff\xff\xff\x0f",  # a length past the end
        b"\x08" + b"\xff" * 11,  # a varint too long
        length_delimited(6, deep_bytes(300)),  # a RunRequest.state 600 levels deep
    )
    return st.one_of(st.binary(max_size=64), st.sampled_from(crafted))
