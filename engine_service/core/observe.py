"""What a run reports at its start and end, for the log and the metrics.

The engine calls each ``RunObserver`` twice per run, never per event: ``run_started``
once the run is accepted and ``run_finished`` once its end is known (tokens come from the
LLM's usage, the tool calls from the run's own list). ``RunLog``, always present, writes
one INFO line for each; ``engine_service.metrics`` adds the Prometheus side.

An observer that raises is logged and otherwise ignored: it never changes a run.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from agentik.logs import FIELDS
from engine_service.core import events as ev

__all__ = ["RunLog", "RunObserver", "RunObservers", "RunReport", "ToolOutcome"]

log = logging.getLogger("agentik.runs")


class ToolOutcome:
    OK = "ok"
    ERROR = "error"
    TIMEOUT = "timeout"
    UNKNOWN = "unknown_tool"
    """The LLM named a tool that is not there."""


@dataclass(slots=True)
class RunReport:
    """One run, as the log and the metrics see it. Times are ``time.monotonic()``."""

    session_id: str
    run_id: str
    principal: str = ""
    """Who started the run ("" where the engine runs without authentication)."""
    agent: str = ""
    """The agent the run is (``core.agents``)."""
    started: float = field(default_factory=time.monotonic)
    first_token: float = 0.0
    """When the LLM's first text, reasoning or tool call arrived; 0: none did."""
    ended: float = 0.0
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    """Of ``input_tokens``, those served from the LLM's prompt cache."""
    model: str = ""
    """The model the run's LLM calls named."""
    tool_calls: list[tuple[str, str]] = field(default_factory=list)
    """(tool name, ``ToolOutcome``) of each engine tool call, in the order they ended."""
    outcome: str = ""
    """``success``, ``interrupt`` (waits for a person), ``cancelled`` or ``error``."""
    error_code: str = ""
    failed_in: str = ""
    """Where an error came from: ``llm``, ``storage`` or ``internal``."""
    error_cause: str = ""
    """For the log only: what failed and where (the client gets less)."""
    resumes: int = 0
    """How many times the run was resumed after its engine died (``core.resume``)."""
    resumed_on: str = ""
    """The replica that resumed it last ("" when it never was)."""

    def end(self, input_tokens: int, output_tokens: int, outcome: str, cause: str = "") -> None:
        """The run ended with ``outcome`` (``error``: ``error_code``/``failed_in`` say more)."""
        self.ended = time.monotonic()
        self.input_tokens, self.output_tokens = input_tokens, output_tokens
        self.outcome = outcome
        if outcome == "error":
            self.failed_in = self.failed_in or "storage"
        if cause and not self.error_cause:
            self.error_cause = cause

    def first_token_now(self) -> None:
        """The LLM's first text, reasoning or tool call arrived (noted the first time)."""
        if not self.first_token:
            self.first_token = time.monotonic()

    def close(
        self,
        final: ev.RunFinished | ev.RunError,
        usage: ev.Usage,
        model: str,
        cause: str = "",
        failure: str = "",
    ) -> None:
        """The run ended with ``final`` having used ``usage`` of ``model``; an error's cause
        is the store's ``failure`` when there was one, else its message."""
        outcome = final.outcome.value if isinstance(final, ev.RunFinished) else "error"
        if isinstance(final, ev.RunError):
            self.error_code = final.code
            cause = failure or final.message
        self.cached_tokens = usage.cached_tokens
        self.model = model
        self.end(usage.input_tokens, usage.output_tokens, outcome, cause)

    @property
    def duration(self) -> float:
        return max((self.ended or time.monotonic()) - self.started, 0.0)

    @property
    def time_to_first_token(self) -> float | None:
        return self.first_token - self.started if self.first_token else None


class RunObserver(Protocol):
    def run_started(self, report: RunReport) -> None: ...

    def run_finished(self, report: RunReport) -> None: ...


class RunLog:
    """One INFO line at each run's start and end."""

    def run_started(self, report: RunReport) -> None:
        if not log.isEnabledFor(logging.INFO):
            return
        fields = {
            "event": "run_started",
            "session_id": report.session_id,
            "run_id": report.run_id,
            "principal": report.principal,
            "agent": report.agent,
        }
        log.info(
            "run started session=%s run=%s principal=%s agent=%s",
            report.session_id,
            report.run_id,
            report.principal or "-",
            report.agent or "-",
            extra={FIELDS: fields},
        )

    def run_finished(self, report: RunReport) -> None:
        if not log.isEnabledFor(logging.INFO):
            return
        ttft = report.time_to_first_token
        fields: dict[str, object] = {
            "event": "run_finished",
            "session_id": report.session_id,
            "run_id": report.run_id,
            "principal": report.principal,
            "agent": report.agent,
            "outcome": report.outcome,
            "duration_s": round(report.duration, 4),
            "first_token_s": None if ttft is None else round(ttft, 4),
            "input_tokens": report.input_tokens,
            "output_tokens": report.output_tokens,
            "tool_calls": len(report.tool_calls),
        }
        failure = ""
        if report.error_code:
            fields["error_code"] = report.error_code
            fields["failed_in"] = report.failed_in
            fields["error_cause"] = report.error_cause
            failure = f" error={report.error_code} cause={report.error_cause!r}"
        if report.resumes:
            fields["resumes"] = report.resumes
            fields["resumed_on"] = report.resumed_on
            failure += f" resumes={report.resumes} resumed_on={report.resumed_on}"
        log.info(
            "run finished session=%s run=%s principal=%s agent=%s outcome=%s duration=%.3fs "
            "tokens_in=%d tokens_out=%d tool_calls=%d%s",
            report.session_id,
            report.run_id,
            report.principal or "-",
            report.agent or "-",
            report.outcome,
            report.duration,
            report.input_tokens,
            report.output_tokens,
            len(report.tool_calls),
            failure,
            extra={FIELDS: fields},
        )


class RunObservers:
    """Several observers as one; one that raises does not stop the others."""

    def __init__(self, observers: Sequence[RunObserver]) -> None:
        self.observers = tuple(observers)

    def run_started(self, report: RunReport) -> None:
        for observer in self.observers:
            try:
                observer.run_started(report)
            except Exception:
                log.exception("run observer %r failed", observer)

    def run_finished(self, report: RunReport) -> None:
        for observer in self.observers:
            try:
                observer.run_finished(report)
            except Exception:
                log.exception("run observer %r failed", observer)
