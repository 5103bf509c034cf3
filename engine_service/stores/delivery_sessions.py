"""The conversation each row of an outbox stored before deliveries named one belongs to:
the backfill of the ``deliveries.session_id`` column (SQLite schema 12, PostgreSQL 9),
the same rules for both stores.

A row is read by what it carries (docs/webhooks.md): a run's webhook names its
conversation (``sessionId``) and run (``runId``) in its payload, and its id is
``run_<run id>.<incarnation>`` (engines before the incarnation wrote ``run_<run id>``); an
A2A push update names the task's conversation (``contextId``) and the task (``taskId``, the
first run of its chain). Ids are unique only among conversations that exist: a
conversation deleted frees its id and its runs' ids for anyone. So a row is tied to a
conversation only when it is that conversation's:

- with an incarnation, when it is the incarnation of the run in the conversation holding
  that id now (its id, owner and creation time): exact;
- without one (an older webhook, a push update), when that conversation holds the run and
  was made no later than the row (a conversation made after it, under the same ids, is a
  later one).

A row whose conversation is gone is deleted, as deleting the conversation deletes its rows
now: no conversation holds its id, or the one that does is another (another incarnation,
or it has no such run). A row that names no conversation (a payload this engine did not
write), and one without an incarnation found in a conversation made after it (a later
conversation under the same ids, or clocks apart), is kept and belongs to none, as before.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from engine_service.core.run_webhooks import incarnation_of
from engine_service.core.tool import session_key

__all__ = ["Claim", "Conversation", "Sorted", "Verdict", "claim_of", "sort_rows", "verdict"]

_INCARNATION = re.compile(r"[0-9a-f]{16}")


@dataclass(frozen=True, slots=True)
class Claim:
    """What an outbox row says of its conversation."""

    delivery_id: str
    session_id: str
    run_id: str
    """The run a webhook announces, or the task (its first run) a push update is of."""
    incarnation: str
    """Of a run webhook's id; "" when the id has none (an older webhook, a push update)."""
    created_at: datetime
    """When the row was made."""


@dataclass(frozen=True, slots=True)
class Conversation:
    """The conversation holding a row's session id now, as the store has it."""

    owner: str
    created_at: datetime
    has_run: bool
    """It holds the run (or task) the row names."""


class Verdict(enum.Enum):
    LINK = "link"
    """The row is this conversation's: it names it from now on."""
    DELETE = "delete"
    """The row's conversation is gone."""
    KEEP = "keep"
    """It cannot be told: the row stays, belonging to none."""


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def claim_of(delivery_id: str, kind: str, payload: str, created_at: datetime) -> Claim | None:
    """What the row says of its conversation; None when it says nothing this engine
    wrote (not JSON, or without the ids)."""
    try:
        body = json.loads(payload)
    except ValueError:
        return None
    if not isinstance(body, dict):
        return None
    if kind == "run":
        session_id, run_id = _text(body.get("sessionId")), _text(body.get("runId"))
        if not (session_id and run_id) or not delivery_id.startswith(f"run_{run_id}"):
            return None
        rest = delivery_id[len(run_id) + 4 :]
        if rest and not (rest[0] == "." and _INCARNATION.fullmatch(rest[1:])):
            return None
        return Claim(delivery_id, session_id, run_id, rest[1:], created_at)
    if kind == "a2a":
        update = body.get("statusUpdate") or body.get("artifactUpdate")
        if not isinstance(update, dict):
            return None
        session_id, task_id = _text(update.get("contextId")), _text(update.get("taskId"))
        if not (session_id and task_id):
            return None
        return Claim(delivery_id, session_id, task_id, "", created_at)
    return None


def verdict(claim: Claim, found: Conversation | None) -> Verdict:
    """What becomes of the row ``claim`` was read from, ``found`` the conversation holding
    its session id now (None: none does). The rules are the module's."""
    if found is None:
        return Verdict.DELETE
    if claim.incarnation:
        key = session_key(claim.session_id, found.owner, found.created_at)
        same = incarnation_of(key, claim.run_id) == claim.incarnation
        return Verdict.LINK if same else Verdict.DELETE
    if not found.has_run:
        return Verdict.DELETE
    return Verdict.LINK if found.created_at <= claim.created_at else Verdict.KEEP


@dataclass(slots=True)
class Sorted:
    """What the backfill writes: ``links`` (delivery id, session id), ``deletes`` (ids)."""

    links: list[tuple[str, str]]
    deletes: list[str]


def sort_rows(claims: Iterable[Claim], found: Mapping[tuple[str, str], Conversation]) -> Sorted:
    """The verdicts of ``claims``, ``found`` by (session id, run id)."""
    out = Sorted([], [])
    for claim in claims:
        decided = verdict(claim, found.get((claim.session_id, claim.run_id)))
        if decided is Verdict.LINK:
            out.links.append((claim.delivery_id, claim.session_id))
        elif decided is Verdict.DELETE:
            out.deletes.append(claim.delivery_id)
    return out
