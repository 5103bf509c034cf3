"""Runs as chains: a run that resumed no other, then each run that resumed the one before
it after it stopped for a person (``RunRecord.resumed_by``). An A2A task is one chain.

:func:`page_chains` turns a page of runs into its chains, with each chain's latest
messages, for one request and bounded work: the page's runs, the links of each chain (at
most :data:`MAX_CHAIN` runs), and one store read of at most ``last_messages`` messages per
chain (:meth:`SessionStore.run_messages`), never a whole history.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from engine_service.core.bounds import bound_message, bound_run, message_size, run_size
from engine_service.core.errors import RunNotFound
from engine_service.core.models import Message, RunRecord
from engine_service.core.store import SessionStore

__all__ = ["MAX_CHAIN", "MAX_LAST_MESSAGES", "RunChain", "fit_chains", "page_chains"]

MAX_CHAIN = 1000
"""Most runs followed in one chain (a bound on a walk through stored links)."""
MAX_LAST_MESSAGES = 100
"""Most messages returned per chain."""


@dataclass(slots=True)
class RunChain:
    """The runs of one chain, its first run first, and its latest messages."""

    runs: list[RunRecord]
    messages: list[Message] = field(default_factory=list)
    clipped: bool = False
    """The chain has earlier messages than ``messages``."""


async def _resumes(store: SessionStore, run: RunRecord, known: dict[str, RunRecord]) -> bool:
    """Whether ``run`` continues its parent's chain (it resumed the parent)."""
    if not run.parent_run_id:
        return False
    parent = known.get(run.parent_run_id)
    if parent is None:
        try:
            parent = await store.get_run(run.session_id, run.parent_run_id)
        except RunNotFound:
            return False
    return parent.resumed_by == run.id


async def _chain_from(
    store: SessionStore, run: RunRecord, known: dict[str, RunRecord]
) -> list[RunRecord]:
    runs = [run]
    while runs[-1].resumed_by and len(runs) < MAX_CHAIN:
        following = runs[-1].resumed_by
        runs.append(known.get(following) or await store.get_run(run.session_id, following))
    return runs


async def page_chains(
    store: SessionStore, page: list[RunRecord], last_messages: int
) -> list[RunChain]:
    """The chains that start on ``page`` (newest first, as the page), each with its last
    ``last_messages`` messages; a run of the page that resumed another adds no chain."""
    known = {run.id: run for run in page}
    resumed = {run.resumed_by for run in page if run.resumed_by}
    chains: list[RunChain] = []
    for run in page:
        if run.id in resumed or await _resumes(store, run, known):
            continue
        chain = RunChain(await _chain_from(store, run, known))
        if last_messages > 0:
            ids = [r.id for r in chain.runs]
            chain.messages, chain.clipped = await store.run_messages(
                run.session_id, ids, last_messages
            )
        chains.append(chain)
    return chains


def fit_chains(chains: list[RunChain], message_limit: int, budget: int) -> list[RunChain]:
    """``chains`` bounded to ``budget`` bytes in all (one gRPC message): each run and
    message bounded (``core.bounds``), the leading chains whose runs fit (at least one),
    and of each chain's messages the latest that fit in what is left (``clipped`` when
    some are left out)."""
    out: list[RunChain] = []
    left = budget
    for chain in chains:
        runs = [bound_run(run, budget) for run in chain.runs]
        cost = sum(run_size(run) for run in runs)
        if out and cost > left:
            break
        left -= cost
        kept: list[Message] = []
        for message in reversed([bound_message(m, message_limit) for m in chain.messages]):
            size = message_size(message)
            if size > left:
                break
            kept.append(message)
            left -= size
        kept.reverse()
        out.append(RunChain(runs, kept, chain.clipped or len(kept) < len(chain.messages)))
    return out
