"""Chains of runs bounded to one gRPC message (``core.chains.fit_chains``)."""

from __future__ import annotations

from datetime import UTC, datetime

from engine_service.core.bounds import message_size, run_size
from engine_service.core.chains import RunChain, fit_chains
from engine_service.core.models import Message, Role, RunRecord, RunStatus, TextPart

T0 = datetime(2026, 1, 1, tzinfo=UTC)
BUDGET = 20_000


def _run(run_id: str, error: str = "") -> RunRecord:
    return RunRecord(run_id, "s", RunStatus.FAILED, T0, error_message=error)


def _message(message_id: str, size: int) -> Message:
    return Message(id=message_id, role=Role.USER, content=[TextPart("x" * size)])


def _size(chains: list[RunChain]) -> int:
    return sum(
        sum(run_size(r) for r in c.runs) + sum(message_size(m) for m in c.messages) for c in chains
    )


def test_the_latest_messages_that_fit_are_kept_and_the_chain_says_it_was_clipped() -> None:
    messages = [_message(f"m{i}", 3_000) for i in range(10)]
    chains = [RunChain([_run("r1")], messages), RunChain([_run("r2")], [_message("z", 10)])]

    fitted = fit_chains(chains, 4_000, BUDGET)

    assert [len(c.runs) for c in fitted] == [1, 1]
    kept = [m.id for m in fitted[0].messages]
    assert kept and kept == [m.id for m in messages[-len(kept) :]]
    assert fitted[0].clipped
    assert _size(fitted) <= BUDGET


def test_chains_whose_runs_do_not_fit_are_left_for_the_next_page() -> None:
    chains = [RunChain([_run(f"r{i}", "e" * 6_000)]) for i in range(10)]

    fitted = fit_chains(chains, 4_000, BUDGET)

    assert 1 <= len(fitted) < len(chains)
    assert [c.runs[0].id for c in fitted] == [f"r{i}" for i in range(len(fitted))]
    assert _size(fitted) <= BUDGET


def test_a_run_bigger_than_the_budget_is_bounded_not_dropped() -> None:
    chains = [RunChain([_run("r0", "e" * 30_000)]), RunChain([_run("r1")])]

    fitted = fit_chains(chains, 4_000, BUDGET)

    assert [c.runs[0].id for c in fitted] == ["r0", "r1"]
    assert fitted[0].runs[0].error_message.startswith("eee")
    assert _size(fitted) <= BUDGET
