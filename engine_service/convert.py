"""Conversions between the core's dataclasses and the gRPC contract's messages.

Input conversions raise ``InvalidInput`` naming the field, so a malformed request is
refused with INVALID_ARGUMENT before anything runs. ``event_to_pb`` is on the per-token
path: it builds each message with keyword arguments in one call and no reflection.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from google.protobuf import json_format, struct_pb2, timestamp_pb2

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from engine_service.core import events as ev
from engine_service.core.deliveries import Delivery, PushConfig
from engine_service.core.errors import InvalidInput
from engine_service.core.hitl import RESPONSE_SCHEMAS
from engine_service.core.models import (
    JSON,
    UNSET,
    ClientTool,
    ContentPart,
    ContextItem,
    DocumentPart,
    ImagePart,
    Interrupt,
    InterruptKind,
    Message,
    MessageStatus,
    ReconcileMode,
    ResumeEntry,
    ResumeStatus,
    Role,
    RunInput,
    RunRecord,
    RunStatus,
    Session,
    TextPart,
    ToolCall,
)

__all__ = [
    "event_to_pb",
    "interrupt_to_pb",
    "message_from_pb",
    "message_to_pb",
    "run_input_from_pb",
    "run_to_pb",
    "session_to_pb",
    "timestamp",
    "failed_webhook_to_pb",
    "push_config_from_pb",
    "push_config_to_pb",
]

ROLE_TO_PB = {
    Role.USER: pb.ROLE_USER,
    Role.ASSISTANT: pb.ROLE_ASSISTANT,
    Role.SYSTEM: pb.ROLE_SYSTEM,
    Role.DEVELOPER: pb.ROLE_DEVELOPER,
    Role.TOOL: pb.ROLE_TOOL,
}
ROLE_FROM_PB = {v: k for k, v in ROLE_TO_PB.items()}
STATUS_TO_PB = {
    MessageStatus.COMPLETE: pb.MESSAGE_STATUS_COMPLETE,
    MessageStatus.INTERRUPTED: pb.MESSAGE_STATUS_INTERRUPTED,
    MessageStatus.ERROR: pb.MESSAGE_STATUS_ERROR,
}
STATUS_FROM_PB = {v: k for k, v in STATUS_TO_PB.items()}
STATUS_FROM_PB[pb.MESSAGE_STATUS_UNSPECIFIED] = MessageStatus.COMPLETE
OUTCOME_TO_PB = {
    ev.Outcome.SUCCESS: pb.OUTCOME_TYPE_SUCCESS,
    ev.Outcome.INTERRUPT: pb.OUTCOME_TYPE_INTERRUPT,
    ev.Outcome.CANCELLED: pb.OUTCOME_TYPE_CANCELLED,
}


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def timestamp(value: datetime | float) -> timestamp_pb2.Timestamp:
    """``value`` to the microsecond (a datetime exactly: no float rounding on the way)."""
    if isinstance(value, datetime):
        delta = value.astimezone(UTC) - _EPOCH  # a naive value is local time, as timestamp()
        micros = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
        whole, fraction = divmod(micros, 1_000_000)
        return timestamp_pb2.Timestamp(seconds=whole, nanos=fraction * 1000)
    whole = math.floor(value)
    return timestamp_pb2.Timestamp(seconds=whole, nanos=int((value - whole) * 1e9))


def _value(value: JSON) -> struct_pb2.Value:
    out = struct_pb2.Value()
    try:
        json_format.ParseDict(value, out)
    except json_format.ParseError as exc:  # pragma: no cover - our values are JSON
        raise ValueError(f"not a JSON value: {exc}") from exc
    return out


def _from_value(value: struct_pb2.Value | struct_pb2.Struct, field: str = "value") -> JSON:
    """A Struct or Value as JSON; a number JSON cannot carry is ``InvalidInput`` naming
    ``field``."""
    try:
        return json_format.MessageToDict(value)
    except ValueError as exc:  # json_format refuses infinite and NaN numbers
        raise InvalidInput(
            f"{field} holds an infinite or NaN number, which JSON cannot carry"
        ) from exc


# -- outbound -------------------------------------------------------------------------


def part_to_pb(part: ContentPart) -> pb.ContentPart:
    if isinstance(part, DocumentPart):
        document = pb.DocumentPart(mime_type=part.mime_type, filename=part.filename)
        if part.file_id:
            document.file_id = part.file_id
        else:
            document.data = part.data
        return pb.ContentPart(document=document)
    if isinstance(part, TextPart):
        return pb.ContentPart(text=pb.TextPart(text=part.text))
    if part.url:
        return pb.ContentPart(image=pb.ImagePart(url=part.url, mime_type=part.mime_type))
    return pb.ContentPart(image=pb.ImagePart(data=part.data, mime_type=part.mime_type))


def message_to_pb(message: Message) -> pb.Message:
    out = pb.Message(
        id=message.id,
        role=ROLE_TO_PB[message.role],
        content=[part_to_pb(p) for p in message.content],
        tool_calls=[
            pb.ToolCall(id=c.id, name=c.name, arguments=c.arguments) for c in message.tool_calls
        ],
        tool_call_id=message.tool_call_id,
        status=STATUS_TO_PB[message.status],
        run_id=message.run_id,
        name=message.name,
    )
    if message.created_at is not None:
        out.create_time.CopyFrom(timestamp(message.created_at))
    if message.metadata is not None:
        json_format.ParseDict(message.metadata, out.metadata)
    return out


INTERRUPT_KIND_TO_PB = {
    InterruptKind.APPROVAL: pb.INTERRUPT_KIND_APPROVAL,
    InterruptKind.QUESTION: pb.INTERRUPT_KIND_QUESTION,
}


def interrupt_to_pb(interrupt: Interrupt) -> pb.Interrupt:
    call = interrupt.tool_call
    out = pb.Interrupt(
        id=interrupt.id,
        kind=INTERRUPT_KIND_TO_PB[interrupt.kind],
        message=interrupt.message,
        tool_call=pb.ToolCall(id=call.id, name=call.name, arguments=call.arguments),
        run_id=interrupt.run_id,
    )
    out.payload.CopyFrom(_value(interrupt.payload))
    out.response_schema.update(RESPONSE_SCHEMAS[interrupt.kind])
    if interrupt.expires_at is not None:
        out.expire_time.CopyFrom(timestamp(interrupt.expires_at))
    return out


def session_to_pb(session: Session, default_agent: str = "") -> pb.Session:
    """``default_agent``: the agent of a session stored before agents (its agent "")."""
    out = pb.Session(
        id=session.id,
        title=session.title,
        create_time=timestamp(session.created_at),
        update_time=timestamp(session.updated_at),
        message_count=session.message_count,
        last_seq=session.last_seq,
        active_run_id=session.active_run_id,
        owner=session.owner,
        pending_interrupts=[interrupt_to_pb(i) for i in session.interrupts],
        usage=_counts(session.input_tokens, session.output_tokens, session.cached_tokens),
        agent=session.agent or default_agent,
    )
    if session.state is not None:
        out.state.CopyFrom(_value(session.state))
    if session.webhook_url:
        out.webhook.url = session.webhook_url
    return out


RUN_STATUS_TO_PB = {
    RunStatus.RUNNING: pb.RUN_STATUS_RUNNING,
    RunStatus.SUCCEEDED: pb.RUN_STATUS_SUCCEEDED,
    RunStatus.FAILED: pb.RUN_STATUS_FAILED,
    RunStatus.INTERRUPTED: pb.RUN_STATUS_INTERRUPTED,
    RunStatus.INPUT_REQUIRED: pb.RUN_STATUS_INPUT_REQUIRED,
}


def run_to_pb(run: RunRecord) -> pb.RunInfo:
    out = pb.RunInfo(
        id=run.id,
        session_id=run.session_id,
        status=RUN_STATUS_TO_PB[run.status],
        start_time=timestamp(run.started_at),
        error_code=run.error_code,
        error_message=run.error_message,
        pending_tool_call_ids=run.pending_tool_call_ids,
        start_seq=run.start_seq,
        interrupts=[interrupt_to_pb(i) for i in run.interrupts],
        resumed_by_run_id=run.resumed_by,
        parent_run_id=run.parent_run_id,
    )
    if run.finished_at is not None:
        out.end_time.CopyFrom(timestamp(run.finished_at))
        out.usage.CopyFrom(_counts(run.input_tokens, run.output_tokens, run.cached_tokens))
    return out


def _counts(input_tokens: int, output_tokens: int, cached_tokens: int) -> pb.Usage:
    return pb.Usage(
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        total_tokens=input_tokens + output_tokens,
        cached_tokens=cached_tokens,
    )


def _usage(usage: ev.Usage | None) -> pb.Usage | None:
    if usage is None:
        return None
    return pb.Usage(
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        total_tokens=usage.total_tokens,
        cached_tokens=usage.cached_tokens,
    )


def _run_finished(b: ev.RunFinished) -> dict[str, Any]:
    finished = pb.RunFinished(
        outcome=OUTCOME_TO_PB[b.outcome],
        pending_tool_call_ids=b.pending_tool_call_ids,
        usage=_usage(b.usage),
        interrupts=[interrupt_to_pb(i) for i in b.interrupts],
    )
    if b.result is not None:
        finished.result.CopyFrom(_value(b.result))
    return {"run_finished": finished}


def _state_delta(b: ev.StateDelta) -> dict[str, Any]:
    delta = struct_pb2.ListValue()
    delta.extend(b.delta)
    return {"state_delta": pb.StateDelta(delta=delta)}


_BODY_TO_PB: dict[type, Callable[[Any], dict[str, Any]]] = {
    ev.TextMessageContent: lambda b: {
        "text_message_content": pb.TextMessageContent(message_id=b.message_id, delta=b.delta)
    },
    ev.ToolCallArgs: lambda b: {
        "tool_call_args": pb.ToolCallArgs(tool_call_id=b.tool_call_id, delta=b.delta)
    },
    ev.ReasoningMessageContent: lambda b: {
        "reasoning_message_content": pb.ReasoningMessageContent(
            message_id=b.message_id, delta=b.delta
        )
    },
    ev.RunStarted: lambda b: {"run_started": pb.RunStarted(parent_run_id=b.parent_run_id)},
    ev.RunFinished: _run_finished,
    ev.RunError: lambda b: {
        "run_error": pb.RunError(message=b.message, code=b.code, usage=_usage(b.usage))
    },
    ev.StepStarted: lambda b: {"step_started": pb.StepStarted(step_name=b.step_name)},
    ev.StepFinished: lambda b: {"step_finished": pb.StepFinished(step_name=b.step_name)},
    ev.TextMessageStart: lambda b: {
        "text_message_start": pb.TextMessageStart(
            message_id=b.message_id, role=ROLE_TO_PB[Role(b.role)]
        )
    },
    ev.TextMessageEnd: lambda b: {"text_message_end": pb.TextMessageEnd(message_id=b.message_id)},
    ev.ToolCallStart: lambda b: {
        "tool_call_start": pb.ToolCallStart(
            tool_call_id=b.tool_call_id,
            tool_call_name=b.tool_call_name,
            parent_message_id=b.parent_message_id,
        )
    },
    ev.ToolCallEnd: lambda b: {"tool_call_end": pb.ToolCallEnd(tool_call_id=b.tool_call_id)},
    ev.ToolCallResult: lambda b: {
        "tool_call_result": pb.ToolCallResult(
            message_id=b.message_id,
            tool_call_id=b.tool_call_id,
            content=b.content,
            is_error=b.is_error,
            parts=[part_to_pb(p) for p in b.parts],
        )
    },
    ev.ReasoningStart: lambda b: {"reasoning_start": pb.ReasoningStart(message_id=b.message_id)},
    ev.ReasoningMessageStart: lambda b: {
        "reasoning_message_start": pb.ReasoningMessageStart(message_id=b.message_id)
    },
    ev.ReasoningMessageEnd: lambda b: {
        "reasoning_message_end": pb.ReasoningMessageEnd(message_id=b.message_id)
    },
    ev.ReasoningEnd: lambda b: {"reasoning_end": pb.ReasoningEnd(message_id=b.message_id)},
    ev.StateSnapshot: lambda b: {"state_snapshot": pb.StateSnapshot(snapshot=_value(b.snapshot))},
    ev.StateDelta: _state_delta,
    ev.MessagesSnapshot: lambda b: {
        "messages_snapshot": pb.MessagesSnapshot(messages=[message_to_pb(m) for m in b.messages])
    },
    ev.Custom: lambda b: {"custom": pb.Custom(name=b.name, value=_value(b.value))},
    ev.Raw: lambda b: {"raw": pb.Raw(event=_value(b.event), source=b.source)},
    ev.MessageStored: lambda b: {
        "message_stored": pb.MessageStored(message=message_to_pb(b.message))
    },
}


def event_to_pb(event: ev.Event) -> pb.Event:
    seconds = int(event.time)
    return pb.Event(
        seq=event.seq,
        time=timestamp_pb2.Timestamp(seconds=seconds, nanos=int((event.time - seconds) * 1e9)),
        session_id=event.session_id,
        run_id=event.run_id,
        **_BODY_TO_PB[type(event.body)](event.body),
    )


# -- inbound --------------------------------------------------------------------------


def part_from_pb(part: pb.ContentPart, where: str) -> ContentPart:
    kind = part.WhichOneof("part")
    if kind == "text":
        return TextPart(part.text.text)
    if kind == "image":
        image = part.image
        source = image.WhichOneof("source")
        if source == "url":
            if not image.url:
                raise InvalidInput(f"{where}.image.url is empty")
            return ImagePart(url=image.url, mime_type=image.mime_type)
        if source == "data":
            if not image.data:  # an empty image is refused by the LLM on every later turn
                raise InvalidInput(f"{where}.image.data is empty")
            if not image.mime_type:
                raise InvalidInput(f"{where}.image.mime_type is required with data")
            return ImagePart(data=image.data, mime_type=image.mime_type)
        raise InvalidInput(f"{where}.image needs a url or data")
    if kind == "document":
        document = part.document
        held = document.WhichOneof("source")
        if held is None:
            raise InvalidInput(f"{where}.document needs data or a file_id")
        if held == "data" and not document.mime_type:
            raise InvalidInput(f"{where}.document.mime_type is required with data")
        return DocumentPart(
            data=document.data,
            file_id=document.file_id,
            mime_type=document.mime_type,
            filename=document.filename,
        )
    raise InvalidInput(f"{where} is empty (set text, image or document)")


def message_from_pb(message: pb.Message, where: str) -> Message:
    role = ROLE_FROM_PB.get(message.role)
    if role is None:
        raise InvalidInput(f"{where}.role is required (user, assistant, system, developer, tool)")
    status = STATUS_FROM_PB.get(message.status)
    if status is None:
        raise InvalidInput(f"{where}.status has an unknown value {message.status}")
    return Message(
        id=message.id,
        role=role,
        content=[part_from_pb(p, f"{where}.content[{i}]") for i, p in enumerate(message.content)],
        tool_calls=[ToolCall(c.id, c.name, c.arguments) for c in message.tool_calls],
        tool_call_id=message.tool_call_id,
        status=status,
        name=message.name,
        metadata=_metadata(message, where),
    )


def _metadata(message: pb.Message, where: str) -> dict[str, JSON] | None:
    if not message.HasField("metadata"):
        return None
    value = _from_value(message.metadata, f"{where}.metadata")
    return value if isinstance(value, dict) else None


def run_input_from_pb(request: pb.RunRequest) -> RunInput:
    if request.reconcile == pb.RECONCILE_MODE_REPLACE:
        reconcile = ReconcileMode.REPLACE
    elif request.reconcile in (pb.RECONCILE_MODE_UNSPECIFIED, pb.RECONCILE_MODE_APPEND):
        reconcile = ReconcileMode.APPEND
    else:
        raise InvalidInput(f"reconcile has an unknown value {request.reconcile}")
    return RunInput(
        session_id=request.session_id,
        run_id=request.run_id,
        messages=[message_from_pb(m, f"messages[{i}]") for i, m in enumerate(request.messages)],
        tools=[
            ClientTool(t.name, t.description, _from_value(t.parameters, f"tools[{i}].parameters"))
            for i, t in enumerate(request.tools)
        ],
        context=[ContextItem(c.description, c.value) for c in request.context],
        state=_from_value(request.state, "state") if request.HasField("state") else UNSET,
        forwarded_props=_from_value(request.forwarded_props, "forwarded_props"),
        reconcile=reconcile,
        create_session=request.create_session,
        cancel_on_disconnect=request.cancel_on_disconnect,
        parent_run_id=request.parent_run_id,
        messages_snapshot=request.messages_snapshot,
        resume=[_resume_from_pb(e, f"resume[{i}]") for i, e in enumerate(request.resume)],
        webhook_url=request.webhook.url if request.HasField("webhook") else "",
        push_configs=[push_config_from_pb(c) for c in request.push_configs],
        agent=request.agent,
    )


def push_config_to_pb(config: PushConfig) -> pb.PushConfig:
    return pb.PushConfig(
        id=config.id,
        task_id=config.task_id,
        url=config.url,
        token=config.token,
        auth_scheme=config.auth_scheme,
        auth_credentials=config.auth_credentials,
    )


def push_config_from_pb(config: pb.PushConfig) -> PushConfig:
    """The request's config; its session and time are the engine's to fill."""
    return PushConfig(
        config.id,
        config.task_id,
        "",
        config.url,
        datetime.now(UTC),
        config.token,
        config.auth_scheme,
        config.auth_credentials,
    )


def failed_webhook_to_pb(delivery: Delivery) -> pb.FailedWebhook:
    out = pb.FailedWebhook(
        id=delivery.id,
        kind=delivery.kind,
        url=delivery.url,
        attempts=delivery.attempts,
        last_error=delivery.last_error,
        create_time=timestamp(delivery.created_at),
    )
    if delivery.updated_at is not None:
        out.fail_time.CopyFrom(timestamp(delivery.updated_at))
    return out


RESUME_STATUS_FROM_PB = {
    pb.RESUME_STATUS_RESOLVED: ResumeStatus.RESOLVED,
    pb.RESUME_STATUS_CANCELLED: ResumeStatus.CANCELLED,
}


def _resume_from_pb(entry: pb.ResumeEntry, where: str) -> ResumeEntry:
    status = RESUME_STATUS_FROM_PB.get(entry.status)
    if status is None:
        raise InvalidInput(f"{where}.status must be RESUME_STATUS_RESOLVED or _CANCELLED")
    payload = _from_value(entry.payload, f"{where}.payload") if entry.HasField("payload") else None
    return ResumeEntry(entry.interrupt_id, status, payload)
