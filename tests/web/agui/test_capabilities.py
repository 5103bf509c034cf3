"""AG-UI's capabilities discovery (``GET /agui[/{agent}]/capabilities``) and multimodal
input through ``POST /agui``: an agent whose model takes text only says so, and refuses an
image part with 400 naming the part and the agent; one that takes images passes them on."""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import Any, cast

import pytest
from ag_ui.core import AgentCapabilities
from flask import Flask
from flask.testing import FlaskClient

from tests.fakes.fake_openai import FakeOpenAI
from tests.web.agui.agui_reader import AguiReader, types
from tests.web.conftest import BackgroundEngine, engine_settings

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n").decode()


def _image_run(image: dict[str, Any]) -> dict[str, Any]:
    content = [{"type": "text", "text": "what is this?"}, image]
    return {
        "threadId": f"t-{uuid.uuid4().hex}",
        "runId": f"r-{uuid.uuid4().hex}",
        "messages": [{"id": f"u-{uuid.uuid4().hex}", "role": "user", "content": content}],
    }


@pytest.fixture(scope="module")
def text_only_target(llm: FakeOpenAI) -> Iterator[str]:
    engine = BackgroundEngine(engine_settings(llm, AGENTIK_INPUT_MODALITIES="text"))
    yield engine.start()
    engine.stop()


@pytest.fixture
def text_only(make_app: Callable[..., Flask], text_only_target: str) -> FlaskClient:
    return make_app(text_only_target).test_client()


@pytest.fixture(scope="module")
def pdf_target(llm: FakeOpenAI) -> Iterator[str]:
    modalities = "text,image,document"
    engine = BackgroundEngine(engine_settings(llm, AGENTIK_INPUT_MODALITIES=modalities))
    yield engine.start()
    engine.stop()


@pytest.fixture
def reads_pdfs(make_app: Callable[..., Flask], pdf_target: str) -> FlaskClient:
    return make_app(pdf_target).test_client()


PDF = base64.b64encode(b"%PDF-1.4\n1 0 obj<<>>endobj\ntrailer<<>>\n%%EOF").decode()


def _document(source: dict[str, Any], filename: str = "") -> dict[str, Any]:
    part: dict[str, Any] = {"type": "document", "source": source}
    if filename:
        part["metadata"] = {"filename": filename}
    return part


def _streamed(client: FlaskClient, body: dict[str, Any]) -> list[Any]:
    response = client.post("/agui", json=body, buffered=False)
    assert response.status_code == 200, response.get_data(as_text=True)
    return AguiReader(cast("Iterable[bytes]", response.response)).read_to_end()


def test_the_default_agents_capabilities_validate_and_declare_what_agentik_does(
    client: FlaskClient,
) -> None:
    response = client.get("/agui/capabilities")

    assert response.status_code == 200, response.get_data(as_text=True)
    body = response.get_json()
    AgentCapabilities.model_validate(body)
    assert body["identity"]["name"] == "agentik" and body["identity"]["type"] == "agentik"
    assert body["transport"] == {"streaming": True}
    tools = {tool["name"]: tool for tool in body["tools"]["items"]}
    assert "expression" in tools["calculate"]["parameters"]["properties"]
    assert body["tools"]["clientProvided"] is True
    assert body["state"]["snapshots"] and body["state"]["deltas"]
    assert body["multimodal"]["input"]["image"] is True
    assert body["multimodal"]["input"]["pdf"] is False
    assert body["humanInTheLoop"]["interrupts"] is True
    assert body["execution"] == {"maxIterations": 8}
    assert body["custom"]["agentik"]["activityTypes"] == ["tool_progress", "compaction"]
    assert "null" not in response.get_data(as_text=True)  # absent, not null
    assert client.get("/agui/agentik/capabilities").get_json() == body


def test_the_capabilities_of_an_agent_not_served_are_404(client: FlaskClient) -> None:
    response = client.get("/agui/nobody/capabilities")

    assert response.status_code == 404
    assert response.get_json()["error"]["code"] == "agent_not_found"


def test_a_text_only_model_declares_no_image_input_and_refuses_an_image_with_400(
    text_only: FlaskClient, llm: FakeOpenAI
) -> None:
    assert text_only.get("/agui/capabilities").get_json()["multimodal"]["input"]["image"] is False
    before = len(llm.requests)

    for image in (
        {"type": "image", "source": {"type": "data", "value": PNG, "mimeType": "image/png"}},
        {"type": "image", "source": {"type": "url", "value": "https://example.com/a.png"}},
    ):
        response = text_only.post("/agui", json=_image_run(image))
        assert response.status_code == 400, response.get_data(as_text=True)
        error = response.get_json()["error"]
        assert error["code"] == "invalid_argument"
        assert error["message"].startswith("messages[0].content[1] is an image part")
        assert "agent 'agentik'" in error["message"] and "takes text only" in error["message"]
    assert len(llm.requests) == before


def test_an_image_part_reaches_a_model_that_takes_images(
    client: FlaskClient, llm: FakeOpenAI
) -> None:
    image = {"type": "image", "source": {"type": "data", "value": PNG, "mimeType": "image/png"}}
    response = client.post("/agui", json=_image_run(image), buffered=False)
    assert response.status_code == 200
    events = AguiReader(cast("Iterable[bytes]", response.response)).read_to_end()

    assert types(events)[-1] == "RUN_FINISHED"
    (user,) = [m for m in llm.requests[-1]["messages"] if m["role"] == "user"]
    assert {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}} in user[
        "content"
    ]


@pytest.mark.parametrize("kind", ["audio", "video"])
def test_media_the_engine_cannot_hold_are_refused_naming_the_part_type(
    client: FlaskClient, kind: str
) -> None:
    part = {"type": kind, "source": {"type": "data", "value": PNG, "mimeType": "application/pdf"}}
    response = client.post("/agui", json=_image_run(part))

    assert response.status_code == 422
    assert (
        f"messages[0].content[1]: {kind} parts are not supported"
        in response.get_json()["error"]["message"]
    )


def test_message_metadata_is_kept_and_comes_back_in_the_snapshot_but_never_reaches_the_llm(
    client: FlaskClient, llm: FakeOpenAI
) -> None:
    metadata = {"source": "voice", "confidence": 0.92, "attempt": 2, "tags": ["a", None]}
    body = {
        "threadId": f"t-{uuid.uuid4().hex}",
        "runId": f"r-{uuid.uuid4().hex}",
        "messages": [
            {"id": "u-meta", "role": "user", "content": "hello there", "metadata": metadata}
        ],
    }
    response = client.post("/agui", json=body, buffered=False)
    assert response.status_code == 200
    events = AguiReader(cast("Iterable[bytes]", response.response)).read_to_end()

    (snapshot,) = [e for e in events if e.type == "MESSAGES_SNAPSHOT"]
    user, answer = snapshot.model_dump(by_alias=True, mode="json")["messages"]
    assert (user["id"], user["metadata"]) == ("u-meta", metadata)
    assert "metadata" not in answer
    assert "voice" not in json.dumps(llm.requests[-1])
    # a later run of the thread still has it (stored with the message)
    body = {**body, "runId": f"r-{uuid.uuid4().hex}", "messages": []}
    body["messages"] = [{"id": "u-next", "role": "user", "content": "again"}]
    later = client.post("/agui", json=body, buffered=False)
    events = AguiReader(cast("Iterable[bytes]", later.response)).read_to_end()
    (snapshot,) = [e for e in events if e.type == "MESSAGES_SNAPSHOT"]
    first = snapshot.model_dump(by_alias=True, mode="json")["messages"][0]
    assert first["metadata"] == metadata


def test_a_model_that_reads_documents_gets_a_pdf_as_a_file_part_and_the_snapshot_keeps_it(
    reads_pdfs: FlaskClient, llm: FakeOpenAI
) -> None:
    caps = reads_pdfs.get("/agui/capabilities").get_json()["multimodal"]["input"]
    assert (caps["image"], caps["pdf"]) == (True, True)
    pdf = {"type": "data", "value": PDF, "mimeType": "application/pdf"}
    events = _streamed(reads_pdfs, _image_run(_document(pdf, "report.pdf")))

    assert types(events)[-1] == "RUN_FINISHED"
    (user,) = [m for m in llm.requests[-1]["messages"] if m["role"] == "user"]
    assert user["content"][1] == {
        "type": "file",
        "file": {"filename": "report.pdf", "file_data": f"data:application/pdf;base64,{PDF}"},
    }
    (snapshot,) = [e for e in events if e.type == "MESSAGES_SNAPSHOT"]
    sent = snapshot.model_dump(by_alias=True, mode="json")["messages"][0]["content"][1]
    assert sent == {"type": "document", "source": pdf, "metadata": {"filename": "report.pdf"}}


def test_a_providers_file_id_is_passed_on_as_is(reads_pdfs: FlaskClient, llm: FakeOpenAI) -> None:
    handle = {"type": "file", "value": "file-abc123", "provider": "openai"}
    _streamed(reads_pdfs, _image_run(_document(handle)))

    (user,) = [m for m in llm.requests[-1]["messages"] if m["role"] == "user"]
    assert user["content"][1] == {"type": "file", "file": {"file_id": "file-abc123"}}


@pytest.mark.parametrize(
    ("source", "status", "says"),
    [
        ({"type": "url", "value": "https://example.com/a.pdf"}, 422, "cannot be sent by url"),
        ({"type": "file", "value": "x", "provider": "google"}, 422, "file handle of 'google'"),
        ({"type": "data", "value": "%%%", "mimeType": "application/pdf"}, 422, "not valid base64"),
        ({"type": "data", "value": PDF, "mimeType": "text/html"}, 400, "is not a document type"),
        ({"type": "file", "value": "../../etc/passwd"}, 400, "is not a provider file id"),
        ({"type": "file", "value": "https://evil.example/x"}, 400, "is not a provider file id"),
    ],
)
def test_a_document_agentik_cannot_pass_on_is_refused_naming_the_part(
    reads_pdfs: FlaskClient, source: dict[str, Any], status: int, says: str
) -> None:
    response = reads_pdfs.post("/agui", json=_image_run(_document(source)))

    assert response.status_code == status, response.get_data(as_text=True)
    message = response.get_json()["error"]["message"]
    assert message.startswith("messages[0].content[1]") and says in message


def test_a_model_that_does_not_read_documents_refuses_one_with_400(
    client: FlaskClient, llm: FakeOpenAI
) -> None:
    assert client.get("/agui/capabilities").get_json()["multimodal"]["input"]["pdf"] is False
    before = len(llm.requests)
    pdf = {"type": "data", "value": PDF, "mimeType": "application/pdf"}
    response = client.post("/agui", json=_image_run(_document(pdf)))

    assert response.status_code == 400
    message = response.get_json()["error"]["message"]
    assert message.startswith("messages[0].content[1] is a document part, and agent 'agentik'")
    assert "takes text and image only" in message
    assert len(llm.requests) == before
