"""What an outbox row of an older schema says of its conversation, and what becomes of it
(``engine_service.stores.delivery_sessions``): the rules both stores' backfills follow."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from engine_service.core.run_webhooks import run_delivery_id
from engine_service.core.tool import session_key
from engine_service.stores.delivery_sessions import (
    Claim,
    Conversation,
    Verdict,
    claim_of,
    sort_rows,
    verdict,
)

T0 = datetime(2026, 12, 6, tzinfo=UTC)
HEX = "0123456789abcdef"


def _webhook(delivery_id: str, session_id: str = "s1", run_id: str = "r1") -> str:
    body = {"type": "run.finished", "id": delivery_id, "runId": run_id, "sessionId": session_id}
    return json.dumps(body, separators=(",", ":"))


@pytest.mark.parametrize(
    ("delivery_id", "run_id", "incarnation"),
    [
        (f"run_r1.{HEX}", "r1", HEX),
        ("run_r1", "r1", ""),  # engines before the incarnation
        (f"run_job.{HEX}", f"job.{HEX}", ""),  # an older id whose run id looks like one
        (f"run_job.{HEX}.{'f' * 16}", f"job.{HEX}", "f" * 16),
    ],
)
def test_a_webhook_names_its_run_as_its_payload_says(
    delivery_id: str, run_id: str, incarnation: str
) -> None:
    claim = claim_of(delivery_id, "run", _webhook(delivery_id, "s1", run_id), T0)
    assert claim == Claim(delivery_id, "s1", run_id, incarnation, T0)


@pytest.mark.parametrize(
    ("delivery_id", "payload"),
    [
        ("run_r1", '{"secret":1}'),
        ("run_r1", "not json"),
        ("run_r1", "[1]"),
        ("run_r1", _webhook("run_r1", "", "r1")),
        ("run_r2", _webhook("run_r2", "s1", "r1")),  # the id is not of that run
        ("run_r1x", _webhook("run_r1x", "s1", "r1")),
        ("run_r1.0123", _webhook("run_r1.0123", "s1", "r1")),
    ],
)
def test_a_row_that_does_not_say_as_engines_write_names_nothing(
    delivery_id: str, payload: str
) -> None:
    assert claim_of(delivery_id, "run", payload, T0) is None
    assert claim_of(delivery_id, "other", _webhook(delivery_id), T0) is None


@pytest.mark.parametrize("kind", ["statusUpdate", "artifactUpdate"])
def test_a_push_update_names_the_task_s_conversation_and_task(kind: str) -> None:
    payload = json.dumps({kind: {"taskId": "t1", "contextId": "s1", "x": {"taskId": "no"}}})
    assert claim_of("push_1", "a2a", payload, T0) == Claim("push_1", "s1", "t1", "", T0)
    assert claim_of("push_1", "a2a", json.dumps({kind: {"taskId": "t1"}}), T0) is None


def test_a_webhook_with_an_incarnation_is_its_conversation_s_only_if_it_is_the_same_one() -> None:
    made = T0 + timedelta(microseconds=123456)
    incarnation = run_delivery_id(session_key("s1", "bob", made), "r1").rsplit(".", 1)[1]
    claim = Claim(f"run_r1.{incarnation}", "s1", "r1", incarnation, T0 + timedelta(hours=1))
    assert verdict(claim, Conversation("bob", made, True)) is Verdict.LINK
    assert verdict(claim, Conversation("alice", made, True)) is Verdict.DELETE
    later = made + timedelta(microseconds=1)
    assert verdict(claim, Conversation("bob", later, True)) is Verdict.DELETE
    assert verdict(claim, None) is Verdict.DELETE


def test_a_row_without_an_incarnation_goes_by_the_run_and_the_conversation_s_age() -> None:
    claim = Claim("run_r1", "s1", "r1", "", T0)
    assert verdict(claim, Conversation("bob", T0, True)) is Verdict.LINK
    assert verdict(claim, Conversation("bob", T0 - timedelta(days=1), True)) is Verdict.LINK
    assert verdict(claim, Conversation("bob", T0, False)) is Verdict.DELETE
    made_after = Conversation("bob", T0 + timedelta(seconds=1), True)
    assert verdict(claim, made_after) is Verdict.KEEP
    assert verdict(claim, None) is Verdict.DELETE


def test_rows_are_sorted_into_links_and_deletes() -> None:
    claims = [
        Claim("run_a", "s1", "a", "", T0),
        Claim("run_b", "s2", "b", "", T0),
        Claim("run_c", "s1", "c", "", T0),
    ]
    found = {("s1", "a"): Conversation("o", T0, True), ("s1", "c"): Conversation("o", T0, False)}
    out = sort_rows(claims, found)
    assert (out.links, out.deletes) == ([("run_a", "s1")], ["run_b", "run_c"])
