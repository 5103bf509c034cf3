"""What a run's input must be before the engine accepts it, what it gives the session,
and the history it starts from.

Checked before anything is stored, so a bad request changes nothing and its error names
the field at fault.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from engine_service.core import events as ev
from engine_service.core.bounds import MESSAGE_ROOM, bound_message, message_size
from engine_service.core.client_tools import check_client_tools
from engine_service.core.clock import utc_now
from engine_service.core.errors import InvalidInput
from engine_service.core.history import prepare_incoming, reconcile
from engine_service.core.ids import check_id
from engine_service.core.limits import RunLimits
from engine_service.core.models import (
    UNSET,
    DocumentPart,
    ImagePart,
    Message,
    ReconcileMode,
    Role,
    RunInput,
    Session,
    TextPart,
)
from engine_service.core.state import check_state
from engine_service.core.store import Checkpoint, Opening, RunContext, SessionStore
from engine_service.core.text import title_from
from engine_service.core.tool import Tool
from engine_service.core.window import refuse_too_long

__all__ = [
    "check_input",
    "check_media",
    "first_title",
    "opening",
    "read_history",
    "started_from",
]


def check_input(
    run_input: RunInput,
    limits: RunLimits,
    engine_tool: Callable[[str], Tool | None],
    agent: str = "",
) -> list[Message]:
    """The run's new messages, prepared (``history.prepare_incoming``); ``InvalidInput``
    when a message, a client tool, a resume entry or the state is not acceptable.
    ``agent`` names the agent (and its model) in the refusal of a part it does not take."""
    incoming = prepare_incoming(run_input.messages)
    check_media(incoming, limits, agent)
    check_client_tools(run_input.tools, lambda name: engine_tool(name) is not None)
    _refuse_oversized(incoming, limits.max_event_bytes - MESSAGE_ROOM)
    refuse_too_long(incoming, limits.context, limits.system_prompt)  # the model's window
    for index, entry in enumerate(run_input.resume):
        check_id(entry.interrupt_id, f"resume[{index}].interrupt_id")
    if run_input.state is not UNSET:
        check_state(run_input.state, limits.max_state_bytes)
    return incoming


def check_media(messages: Sequence[Message], limits: RunLimits, agent: str) -> None:
    """``InvalidInput`` for an image or a document the agent's model does not take, or for
    more media parts than ``max_media_parts``."""
    count = 0
    takes = limits.input_modalities
    for index, message in enumerate(messages):
        for part_index, part in enumerate(message.content):
            if isinstance(part, ImagePart):
                kind = "image"
            elif isinstance(part, DocumentPart):
                kind = "document"
            else:
                continue
            if kind not in takes:
                who = agent or "this agent"
                raise InvalidInput(
                    f"messages[{index}].content[{part_index}] is {_article(kind)} part, and "
                    f"{who} takes {' and '.join(takes)} only ([llm] input_modalities)"
                )
            count += 1
            if count > limits.max_media_parts:
                raise InvalidInput(
                    f"messages[{index}].content[{part_index}]: a run may send at most "
                    f"{limits.max_media_parts} image and document parts ([llm] max_media_parts)"
                )


def _article(kind: str) -> str:
    return f"an {kind}" if kind[0] in "aeiou" else f"a {kind}"


def _refuse_oversized(messages: Sequence[Message], limit: int) -> None:
    """``InvalidInput`` naming the first new message too large to store and hand out."""
    for index, message in enumerate(messages):
        size = message_size(message)
        if size > limit:
            raise InvalidInput(
                f"messages[{index}] is about {size:,} bytes; a message may hold at most "
                f"{limit:,} ([engine] max_event_bytes)"
            )


def first_title(session: Session, incoming: Sequence[Message]) -> str:
    """The title a conversation's first run gives it, when it has none: the start of its
    first user message's text (a client's own title is never replaced)."""
    if session.title or session.message_count:
        return ""
    return _title_of(incoming)


def opening(run_input: RunInput, incoming: list[Message]) -> Opening | None:
    """What a run can store as it begins (``SessionStore.begin_run``), when it starts from
    the client's messages alone (appended; no state, no answers to interrupts): its
    RUN_STARTED, the messages (stamped now, as the run's) and their MESSAGE_STORED, and
    the title they give an untitled conversation (the store keeps those of them the
    conversation does not hold: ``Opening.after``). None when it cannot."""
    if (
        not incoming
        or run_input.resume
        or run_input.reconcile is not ReconcileMode.APPEND
        or run_input.state is not UNSET
    ):
        return None
    now = utc_now()
    for message in incoming:
        message.created_at = now
        message.run_id = run_input.run_id
    events: list[ev.EventBody] = [ev.RunStarted(parent_run_id=run_input.parent_run_id)]
    events += [ev.MessageStored(message) for message in incoming]
    return Opening(incoming, events, _title_of(incoming))


def _title_of(incoming: Sequence[Message]) -> str:
    for message in incoming:
        if message.role is Role.USER:
            text = " ".join(p.text for p in message.content if isinstance(p, TextPart))
            return title_from(text)
    return ""


async def read_history(
    store: SessionStore,
    session: Session,
    mode: ReconcileMode,
    incoming: list[Message],
    limit: int,
) -> tuple[Checkpoint | None, list[Message], list[Message]]:
    """What a new run of ``session`` starts from: its checkpoint, the history after it
    (each message clipped to ``limit`` bytes) and the new messages not stored yet.

    Context budget (``core.context``): only the checkpoint and the messages after it are
    read, and which new ids are known is read by index: bounded by the window, not by the
    conversation's length. A conversation with no messages yet (just made, most often), or
    a ``REPLACE``, reads nothing: one store round trip less before the run starts."""
    if mode is not ReconcileMode.APPEND or not session.message_count:
        return None, [], incoming
    context = await store.run_context(session.id, [m.id for m in incoming])
    return started_from(context, incoming, limit)


def started_from(
    context: RunContext, incoming: list[Message], limit: int
) -> tuple[Checkpoint | None, list[Message], list[Message]]:
    """``read_history``'s answer from the ``context`` a store read (``run_context``, or
    ``begin_run`` with an opening: ``RunBegun.context``)."""
    checkpoint, history, known = context
    # Rows stored before the bound (or under a larger one) are clipped on read.
    return checkpoint, [bound_message(m, limit) for m in history], reconcile(known, incoming)
