"""Human in the loop against a hostile second principal and clumsy clients, on every surface.

Alice's run waits for her approval. Bob knows her conversation, run, task and interrupt ids;
through /agentik, AG-UI and A2A he can neither answer, cancel nor see the request, and his
own conversation does not admit her interrupt id either. A misspelled decline is a 400
naming the key on every surface, never an approval.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from flask.testing import FlaskClient

from tests.web.test_auth import (
    ALICE,
    BOB,
    V10,
    client,
    make_client,
    rpc,
    rpc_body,
    start_engine,
    user_message,
)

__all__ = ["client", "make_client", "start_engine"]

GATED = '[[tool:calculate {"expression": "2+2"}]]'


def _agui(thread_id: str, text: str = "", resume: list[Any] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "threadId": thread_id,
        "runId": uuid.uuid4().hex,
        "state": {},
        "messages": [],
        "tools": [],
        "context": [],
        "forwardedProps": {},
    }
    if text:
        body["messages"] = [{"id": uuid.uuid4().hex, "role": "user", "content": text}]
    if resume is not None:
        body["resume"] = resume
    return body


def _sse_json(response: Any) -> list[dict[str, Any]]:
    out = []
    for line in response.get_data(as_text=True).splitlines():
        if line.startswith("data:"):
            out.append(json.loads(line[5:]))
    return out


def _agui_pause(client: FlaskClient, who: dict[str, str], thread_id: str) -> dict[str, Any]:
    response = client.post("/agui", json=_agui(thread_id, GATED), headers=who)
    assert response.status_code == 200, response.get_data()
    [finished] = [e for e in _sse_json(response) if e["type"] == "RUN_FINISHED"]
    [interrupt] = finished["outcome"]["interrupts"]
    return interrupt  # type: ignore[no-any-return]


def _pending(client: FlaskClient, who: dict[str, str], conversation_id: str) -> list[Any]:
    got = client.get(f"/agentik/conversations/{conversation_id}", headers=who)
    assert got.status_code == 200, got.get_data()
    return got.get_json().get("pending_interrupts", [])  # type: ignore[no-any-return]


def test_bob_cannot_answer_cancel_or_see_alices_interrupt(
    make_client: Any, start_engine: Any
) -> None:
    client: FlaskClient = make_client(start_engine(AGENTIK_TOOLS_APPROVAL="calculate"))
    thread = f"t-{uuid.uuid4().hex}"
    interrupt = _agui_pause(client, ALICE, thread)
    approve = [{"interruptId": interrupt["id"], "status": "resolved", "payload": True}]
    # AG-UI: resume on her thread, and on his own thread with her interrupt id.
    theirs = client.post("/agui", json=_agui(thread, resume=approve), headers=BOB)
    assert theirs.status_code == 404, theirs.get_data()
    own = client.post("/agui", json=_agui(f"b-{uuid.uuid4().hex}", "hi"), headers=BOB)
    assert own.status_code == 200
    # /agentik: resume and interrupt on her conversation.
    decisions = {"decisions": [{"interrupt_id": interrupt["id"], "approve": True}]}
    for path, body in (("resume", decisions), ("interrupt", {})):
        refused = client.post(f"/agentik/conversations/{thread}/{path}", json=body, headers=BOB)
        assert refused.status_code == 404, (path, refused.get_data())
        assert interrupt["id"] not in refused.get_data(as_text=True)
    # A2A: a reply naming her thread as context, and ListTasks.
    reply = rpc(
        client,
        BOB,
        "SendMessage",
        {"message": user_message("yes", contextId=thread)},
    )
    assert interrupt["id"] not in json.dumps(reply)
    listed = rpc(client, BOB, "ListTasks", {})
    assert interrupt["id"] not in json.dumps(listed) and thread not in json.dumps(listed)
    runs = client.get("/agentik/conversations", headers=BOB)
    assert interrupt["id"] not in runs.get_data(as_text=True)
    # Alice still waits, and her approval works.
    assert [i["id"] for i in _pending(client, ALICE, thread)] == [interrupt["id"]]
    done = client.post("/agui", json=_agui(thread, resume=approve), headers=ALICE)
    assert done.status_code == 200
    types = [e["type"] for e in _sse_json(done)]
    assert types.count("TOOL_CALL_RESULT") == 1 and types[-1] == "RUN_FINISHED"


@pytest.mark.parametrize("payload", [{"aproved": False}, {"answer": "no"}])
def test_a_misspelled_decline_over_agui_is_400_naming_the_key(
    make_client: Any, start_engine: Any, payload: dict[str, Any]
) -> None:
    client: FlaskClient = make_client(start_engine(AGENTIK_TOOLS_APPROVAL="calculate"))
    thread = f"t-{uuid.uuid4().hex}"
    interrupt = _agui_pause(client, ALICE, thread)
    resume = [{"interruptId": interrupt["id"], "status": "resolved", "payload": payload}]
    refused = client.post("/agui", json=_agui(thread, resume=resume), headers=ALICE)
    assert refused.status_code == 400, refused.get_data()
    message = refused.get_json()["error"]["message"]
    assert "resume[0].payload has an unknown key" in message, message
    assert [i["id"] for i in _pending(client, ALICE, thread)] == [interrupt["id"]]


def test_an_a2a_reply_on_a_waiting_task_of_another_principal_is_not_found(
    make_client: Any, start_engine: Any
) -> None:
    client: FlaskClient = make_client(start_engine(AGENTIK_TOOLS_APPROVAL="calculate"))
    reply = rpc(client, ALICE, "SendMessage", {"message": user_message(GATED)})
    task = reply["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    bobs = client.post(
        "/",
        json=rpc_body(
            "SendMessage",
            {"message": user_message("yes", taskId=task["id"], contextId=task["contextId"])},
        ),
        headers={**V10, **BOB},
    )
    body = bobs.get_json()
    assert "error" in body, body
    assert "TASK_STATE_INPUT_REQUIRED" not in json.dumps(body)
    got = rpc(client, ALICE, "GetTask", {"id": task["id"]})
    assert got["result"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    cancel = rpc(client, BOB, "CancelTask", {"id": task["id"]})
    assert "error" in cancel, cancel
    got = rpc(client, ALICE, "GetTask", {"id": task["id"]})
    assert got["result"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"approved": True, "argument": {"expression": "9*9"}}, "data.argument"),
        ({"aproved": False}, "data"),  # not an approval at all
        ({"decisions": [{"approved": True, "answer": "no"}]}, "data.decisions[0].answer"),
    ],
    ids=["misspelled-arguments", "misspelled-approved", "approval-with-answer"],
)
def test_an_a2a_decision_with_a_key_it_does_not_know_is_invalid_params(
    make_client: Any, start_engine: Any, data: dict[str, Any], field: str
) -> None:
    client: FlaskClient = make_client(start_engine(AGENTIK_TOOLS_APPROVAL="calculate"))
    task = rpc(client, ALICE, "SendMessage", {"message": user_message(GATED)})["result"]["task"]
    reply = user_message("", taskId=task["id"], contextId=task["contextId"])
    reply["parts"] = [{"data": data}]
    error = rpc(client, ALICE, "SendMessage", {"message": reply})["error"]
    assert error["code"] == -32602, error
    assert error["data"][0]["metadata"]["field"] == f"message.parts[0].{field}"
    got = rpc(client, ALICE, "GetTask", {"id": task["id"]})["result"]
    assert got["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert not [a for a in got.get("artifacts", [])]
