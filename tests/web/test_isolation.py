"""A hostile second principal through the facade: every id a request can carry.

Bob knows alice's conversation, run and task ids. Through ``/agentik``, ``/agui`` and A2A he
gets exactly the answers of unknown ids, changes nothing of hers, and a run id he chooses
equal to one of hers neither hides her task from her nor shows it to him.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from flask.testing import FlaskClient

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from tests.web.test_auth import (
    ALICE,
    BOB,
    OPS,
    V10,
    agui_input,
    assert_not_found,
    client,
    make_client,
    messages,
    new_conversation,
    rpc,
    say,
    start_engine,
    user_message,
)
from web_facade.stream.relay import Resume

__all__ = ["client", "make_client", "start_engine"]


def _task(client: FlaskClient, who: dict[str, str], text: str, **ids: str) -> Any:
    reply = rpc(client, who, "SendMessage", {"message": user_message(text, **ids)})
    assert "result" in reply, reply
    return reply["result"]["task"]


def _same_404(theirs: Any, unknown: Any, their_id: str, unknown_id: str) -> None:
    assert_not_found(theirs)
    assert_not_found(unknown)
    shown = theirs.get_json()["error"]["message"].replace(their_id, "<id>")
    assert shown == unknown.get_json()["error"]["message"].replace(unknown_id, "<id>")


# -- /agentik ------------------------------------------------------------------------


def test_following_alices_conversation_from_any_point_is_the_404_of_an_unknown_one(
    client: FlaskClient,
) -> None:
    alices = new_conversation(client, ALICE, "alice's")
    say(client, ALICE, alices, "alice secret")
    for how in ({"Last-Event-ID": "0"}, {"Last-Event-ID": "1"}, {}):
        for query in ("", "?after=0", "?until_idle=true"):
            theirs = client.get(
                f"/agentik/conversations/{alices}/events{query}", headers={**BOB, **how}
            )
            unknown = client.get(
                f"/agentik/conversations/nobody-{alices}/events{query}", headers={**BOB, **how}
            )
            _same_404(theirs, unknown, alices, f"nobody-{alices}")
            assert "secret" not in theirs.get_data(as_text=True)


def test_interrupt_rename_delete_and_messages_of_alices_conversation_are_404(
    client: FlaskClient,
) -> None:
    alices = new_conversation(client, ALICE, "alice's")
    say(client, ALICE, alices, "alice secret")
    before = messages(client, ALICE, alices)
    other = f"nobody-{alices}"
    calls = [
        ("post", "/interrupt", {"run_id": "r"}),
        ("post", "/interrupt", {}),
        ("post", "/rename", {"title": "bob was here"}),
        ("delete", "", None),
        ("get", "/messages?after=x", None),
        ("get", "/messages", None),
        ("get", "", None),
        ("post", "/send", {"text": "bob"}),
    ]
    for method, tail, body in calls:
        kwargs: dict[str, Any] = {"headers": BOB}
        if body is not None:
            kwargs["json"] = body
        call = getattr(client, method)
        theirs = call(f"/agentik/conversations/{alices}{tail}", **kwargs)
        unknown = call(f"/agentik/conversations/{other}{tail}", **kwargs)
        _same_404(theirs, unknown, alices, other)
    assert messages(client, ALICE, alices) == before
    got = client.get(f"/agentik/conversations/{alices}", headers=ALICE).get_json()
    assert got["title"] == "alice's"


def test_list_paging_and_totals_count_only_ones_own(client: FlaskClient) -> None:
    for index in range(3):
        new_conversation(client, ALICE, f"a{index}")
    new_conversation(client, BOB, "b")
    for offset in (0, 1, 2, 5, 2**31 - 1):
        page = client.get(f"/agentik/conversations?offset={offset}&limit=1", headers=BOB)
        body = page.get_json()
        assert body["total"] == 1, body
        assert len(body["items"]) == (1 if offset == 0 else 0)
        assert all(item["title"] == "b" for item in body["items"])
    assert client.get("/agentik/conversations", headers=OPS).get_json()["total"] == 4


def test_two_authorization_headers_never_act_as_the_second(client: FlaskClient) -> None:
    alices = new_conversation(client, ALICE, "alice's")
    headers = [("Authorization", BOB["Authorization"]), ("Authorization", ALICE["Authorization"])]
    response = client.get(f"/agentik/conversations/{alices}", headers=headers)
    assert response.status_code in (401, 404), response.get_data()
    listed = client.get("/agentik/conversations", headers=headers)
    if listed.status_code == 200:
        assert listed.get_json()["total"] == 0


@pytest.mark.parametrize("scheme", ["bearer", "BEARER", "Bearer "])
def test_the_scheme_is_case_insensitive_and_spaces_do_not_matter(
    client: FlaskClient, scheme: str
) -> None:
    bobs = new_conversation(client, BOB, "bob's")
    token = BOB["Authorization"].split()[1]
    got = client.get(
        f"/agentik/conversations/{bobs}", headers={"Authorization": f"{scheme} {token}  "}
    )
    assert got.status_code == 200, got.get_data()


# -- AG-UI -------------------------------------------------------------------------------


def test_agui_runs_on_alices_thread_with_any_run_id_or_resume_are_refused_alike(
    client: FlaskClient,
) -> None:
    thread = "t-" + uuid.uuid4().hex
    first = agui_input(thread, "alice secret")
    answer = client.post("/agui", json=first, headers=ALICE)
    assert "RUN_FINISHED" in answer.get_data(as_text=True)
    before = messages(client, ALICE, thread)
    unknown_thread = "t-" + uuid.uuid4().hex
    for variant in ("fresh-run", "her-run-id", "state", "replace"):
        body = agui_input(thread, "bob")
        other = agui_input(unknown_thread, "bob")
        if variant == "her-run-id":
            body["runId"] = other["runId"] = first["runId"]
        if variant == "state":
            body["state"] = other["state"] = {"owner": "bob"}
        if variant == "replace":
            body["forwardedProps"] = {"agentik": {"reconcile": "replace"}}
        theirs = client.post("/agui", json=body, headers=BOB)
        assert_not_found(theirs)
        assert "secret" not in theirs.get_data(as_text=True)
    # resume: refused before the engine is asked, for her thread as for any.
    body = {**agui_input(thread, "bob"), "resume": {"interruptId": "x", "payload": {}}}
    other = {**agui_input(unknown_thread, "bob"), "resume": {"interruptId": "x", "payload": {}}}
    theirs, unknown = (client.post("/agui", json=b, headers=BOB) for b in (body, other))
    assert theirs.status_code == unknown.status_code
    assert theirs.get_json() == unknown.get_json()
    assert messages(client, ALICE, thread) == before
    assert_not_found(client.get(f"/agentik/conversations/{unknown_thread}", headers=ALICE))


def test_bob_cannot_take_alices_run_id_and_is_not_told_whose_it_is(client: FlaskClient) -> None:
    alice_thread = "t-" + uuid.uuid4().hex
    first = agui_input(alice_thread, "alice secret")
    assert "RUN_FINISHED" in client.post("/agui", json=first, headers=ALICE).get_data(as_text=True)
    bob_thread = "t-" + uuid.uuid4().hex
    body = {**agui_input(bob_thread, "bob words"), "runId": first["runId"]}
    response = client.post("/agui", json=body, headers=BOB)
    assert response.status_code == 409, response.get_data()
    error = response.get_json()["error"]
    assert error["code"] == "already_exists" and first["runId"] in error["message"]
    assert alice_thread not in error["message"] and "alice" not in error["message"]
    assert client.get(f"/agentik/conversations/{bob_thread}", headers=BOB).status_code == 404


# -- A2A ---------------------------------------------------------------------------------


def test_a_task_id_bob_reuses_as_his_own_run_id_is_refused_and_her_task_stays_hers(
    client: FlaskClient,
) -> None:
    alices = _task(client, ALICE, "alice secret")
    bob_thread = "t-" + uuid.uuid4().hex
    body = {**agui_input(bob_thread, "bob words"), "runId": alices["id"]}
    refused = client.post("/agui", json=body, headers=BOB)
    assert refused.status_code == 409 and "alice" not in refused.get_data(as_text=True)

    hers = rpc(client, ALICE, "GetTask", {"id": alices["id"]})["result"]
    assert hers["contextId"] == alices["contextId"]
    assert "alice secret" in json.dumps(hers) and "bob words" not in json.dumps(hers)
    his = rpc(client, BOB, "GetTask", {"id": alices["id"]})
    assert his["error"]["code"] == -32001 and "alice" not in json.dumps(his)
    listed = rpc(client, ALICE, "ListTasks", {})["result"]
    assert [t["contextId"] for t in listed["tasks"]] == [alices["contextId"]]
    # Bob's cancel of her task id is the cancel of an unknown task.
    cancel = rpc(client, BOB, "CancelTask", {"id": alices["id"]})
    assert cancel["error"]["code"] == -32001, cancel
    assert "alice" not in json.dumps(cancel)


def test_a2a_ids_of_alices_mixed_with_bobs_are_unknown_to_bob(client: FlaskClient) -> None:
    alices = _task(client, ALICE, "alice secret")
    bobs = _task(client, BOB, "bob words")
    unknown_task = uuid.uuid4().hex

    def send(task_id: str, context_id: str) -> Any:
        message = user_message("bob again", taskId=task_id, contextId=context_id)
        return rpc(client, BOB, "SendMessage", {"message": message})

    # Her task with his context; her task with her context: as an unknown task.
    for context_id in (bobs["contextId"], alices["contextId"]):
        theirs = send(alices["id"], context_id)
        unknown = send(unknown_task, context_id)
        assert theirs["error"]["code"] == unknown["error"]["code"] == -32001
        assert theirs["error"]["message"].replace(alices["id"], "<id>") == unknown["error"][
            "message"
        ].replace(unknown_task, "<id>")
    # His task with her context: about his task only, as with any other context.
    mixed = send(bobs["id"], alices["contextId"])
    other = send(bobs["id"], "ctx-" + unknown_task)
    assert mixed["error"]["code"] == other["error"]["code"]
    assert mixed["error"]["message"].replace(alices["contextId"], "<c>") == other["error"][
        "message"
    ].replace("ctx-" + unknown_task, "<c>")
    # GetTask with a history length; ListTasks of her context, with a page token.
    for length in (0, 5):
        got = rpc(client, BOB, "GetTask", {"id": alices["id"], "historyLength": length})
        assert got["error"]["code"] == -32001 and "secret" not in json.dumps(got)
    for token in ("", "1", "999"):
        params: dict[str, Any] = {"contextId": alices["contextId"]}
        if token:
            params["pageToken"] = token
        listed = rpc(client, BOB, "ListTasks", params)["result"]
        assert not listed.get("tasks") and listed.get("totalSize", 0) == 0
        unknown_list = rpc(client, BOB, "ListTasks", {**params, "contextId": unknown_task})
        assert unknown_list["result"] == listed
    assert len(messages(client, ALICE, alices["contextId"])) == 2


def test_a2a_0_3_task_methods_on_alices_task_are_task_not_found(client: FlaskClient) -> None:
    alices = _task(client, ALICE, "alice secret")
    for method in ("tasks/get", "tasks/cancel"):
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": {"id": alices["id"]}}
        reply = client.post("/", json=body, headers=BOB).get_json()
        assert reply["error"]["code"] == -32001, (method, reply)
        assert "secret" not in json.dumps(reply)
    _ = V10


# -- the relay -------------------------------------------------------------------------


class _Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def Subscribe(self, request: pb.SubscribeRequest, metadata: Any = None) -> list[Any]:
        self.calls.append(("Subscribe", metadata))
        return []

    def Interrupt(self, request: Any, timeout: float, metadata: Any = None) -> None:
        self.calls.append(("Interrupt", metadata))


def test_a_resumed_stream_keeps_the_identity_of_the_request_that_opened_it(
    client: FlaskClient,
) -> None:
    app = client.application
    recorder = _Recorder()
    request = pb.SubscribeRequest(session_id="t", after_seq=3)
    with app.test_request_context("/", headers=ALICE):
        resume = Resume.of_subscription(recorder, request)
    with app.test_request_context("/", headers=BOB):  # another request is being handled
        resume.reopen()
        resume.interrupt()
    resume.reopen()  # and on a relay thread, with no request at all
    for _, metadata in recorder.calls:
        assert metadata == (("authorization", ALICE["Authorization"]),)
