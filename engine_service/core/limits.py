"""The limits an engine and each of its runs keep (set from ``[engine]`` and ``[llm]``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from engine_service.core.context import ContextLimits
from engine_service.core.rounds import MAX_ANSWER_BYTES, MAX_TOOL_CALLS, ROUND_TIMEOUT
from engine_service.core.state import DEFAULT_MAX_STATE_BYTES

__all__ = ["EngineLimits", "RunLimits"]


@dataclass(frozen=True, slots=True)
class RunLimits:
    system_prompt: str = ""
    max_tool_rounds: int = 8
    max_answer_bytes: int = MAX_ANSWER_BYTES
    """Bytes of one LLM round's text, reasoning and tool calls; past it the round ends
    with ``llm_answer_too_long`` (``core.rounds``)."""
    max_tool_calls_per_round: int = MAX_TOOL_CALLS
    """Tool calls one LLM round may make; one more ends it with ``llm_too_many_tool_calls``."""
    round_timeout: float = ROUND_TIMEOUT
    """Seconds one LLM round may take from its request; past it, ``llm_timeout``."""
    tool_timeout: float = 30.0
    flush_interval: float = 0.0
    """Seconds a flush waits, after an event is published, to gather more events into
    one write; 0: the next turn of the loop. Events published while a write is in flight
    go in the next write (group commit). Followers see an event once it is stored, so
    this is added to every token's latency."""
    flush_gap: float = 0.005
    """Seconds from the start of one write of a run's events to the start of its next,
    at least, while the events keep coming: an LLM that streams faster has its deltas
    stored (and sent on) a few at a time rather than one write and one message each. The
    first write after a pause, and the start of an answer (its first token), go at once."""
    confirm_gap: float = 0.05
    """Seconds a ``MESSAGE_STORED`` published alone (just after its message's write) waits,
    at most, for the run's next event to be stored in the same write; the run's end, an
    answer's start or any other event ends the wait. 0: it is stored like any event."""
    seq_block: int = 512
    """Seqs reserved in the store ahead of publishing: a crash skips them, never reuses
    them. The run tops the reservation up at every flush when half of it is used."""
    approval: tuple[str, ...] = ()
    """Engine tools (names or globs) whose calls wait for a person's approval."""
    idempotent: tuple[str, ...] = ("current_time", "calculate")
    """Engine tools (names or globs) run again when a dead engine cut their call."""
    in_doubt: str = "ask"
    """A cut call of another tool: ``ask`` a person, or ``error`` (``core.resume``)."""
    interrupt_expiry: float = 0.0
    """Seconds after which an unanswered interrupt counts as declined; 0: never."""
    max_state_bytes: int = DEFAULT_MAX_STATE_BYTES
    """The session's shared state as JSON, at most; a patch is bounded by it as it applies."""
    max_event_bytes: int = 1024 * 1024
    """The largest event the run makes (``core.bounds``): longer deltas are split, tool
    results and messages clipped with a note, the messages snapshot bounded."""
    buffer_bytes: int = 8 * 1024 * 1024
    """Stored events the session's hub keeps for readers that are behind; past this it
    forgets them, and those readers read them from the store."""
    context: ContextLimits = field(default_factory=ContextLimits)
    """The model's context budget and how the conversation is compacted (``core.context``)."""
    input_modalities: tuple[str, ...] = ("text", "image")
    """What the agent's model takes; image parts are refused when ``image`` is not here."""
    max_media_parts: int = 16
    """Image parts one run's new messages may hold, at most."""


@dataclass(frozen=True, slots=True)
class EngineLimits:
    run: RunLimits = field(default_factory=RunLimits)
    max_concurrent_runs: int = 512
    max_runs_per_caller: int = 0
    """Runs one principal may have in flight at once; 0: no limit of its own."""
    max_streams: int = 2048
    """Event streams clients hold open at once on this engine (``core.streams``)."""
    max_streams_per_caller: int = 0
    """Event streams one principal may hold open at once; 0: no limit of its own."""
    max_sessions_per_caller: int = 0
    """Conversations one principal may have stored (``core.quota``); 0: no limit."""
    event_retention: float = 7 * 24 * 3600.0
    """Seconds stored events are kept; 0 keeps them forever."""
    lease_seconds: float = 10.0
    """With a shared store: a replica that died has its runs taken over within this."""
    resume_runs: bool = True
    """A run whose engine died goes on from its last checkpoint (``core.resume``); False:
    it is closed as interrupted (``core.recovery``)."""
    max_resumes: int = 3
    """Resumes one run may have; past this it stops with ``resume_limit``."""
    tokens_per_day: int = 0
    """Tokens one principal's runs may use a UTC day (``core.budget``); 0: no budget."""
