"""What each agent's model takes (``input_modalities``) and how many image parts a run may
send (``max_media_parts``): an image for a text-only agent and one part too many are
INVALID_ARGUMENT naming the part and the agent, before anything is stored; an agent that
takes images has them reach the LLM as ``image_url`` parts. GetAgent says which."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from google.protobuf import json_format

from agentik.config import ConfigError, load_settings
from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from tests.engine.harness import Harness, kinds, refused, run, running_engine
from tests.fakes.fake_openai import FakeOpenAI

CONFIG = """
[llm]
base_url = "{url}"
api_key = "k"
max_retries = 0
max_media_parts = 2

[[agents]]
name = "reader"
model = "text-only-model"
input_modalities = ["text"]
tools = ["calculate"]

[[agents]]
name = "pdfs"
input_modalities = ["text", "document"]
"""

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
async def engine(llm: FakeOpenAI, tmp_path: Path) -> AsyncIterator[Harness]:
    path = tmp_path / "agentik.toml"
    path.write_text(CONFIG.format(url=llm.base_url))
    settings = load_settings(
        path, {"AGENTIK_GRPC_ADDR": "127.0.0.1:0", "AGENTIK_STORE": "memory://"}
    )
    async with running_engine(settings) as running:
        yield running


def _request(session: str, images: int, agent: str = "") -> pb.RunRequest:
    parts = [pb.ContentPart(text=pb.TextPart(text="what is this?"))]
    parts += [pb.ContentPart(image=pb.ImagePart(data=PNG, mime_type="image/png"))] * images
    return pb.RunRequest(
        session_id=session,
        create_session=True,
        agent=agent,
        messages=[pb.Message(role=pb.ROLE_USER, content=parts)],
    )


async def test_an_image_for_a_text_only_agent_is_refused_naming_the_part_and_the_agent(
    engine: Harness, llm: FakeOpenAI
) -> None:
    details = await refused(engine, _request("text-only", 1, agent="reader"))

    assert details.startswith("messages[0].content[1] is an image part")
    assert "agent 'reader' (model 'openai:text-only-model')" in details
    assert "input_modalities" in details
    assert llm.requests == []
    assert (await engine.stub.ListSessions(pb.ListSessionsRequest())).total == 0


async def test_an_agent_that_takes_images_sends_them_to_the_llm_as_image_url_parts(
    engine: Harness, llm: FakeOpenAI
) -> None:
    events = await run(engine, _request("sees", 2))

    assert kinds(events)[-1] == "run_finished"
    (user,) = [m for m in llm.requests[-1]["messages"] if m["role"] == "user"]
    urls = [p["image_url"]["url"] for p in user["content"] if p["type"] == "image_url"]
    assert urls == ["data:image/png;base64,iVBORw0KGgo="] * 2


async def test_more_image_parts_than_max_media_parts_are_refused(
    engine: Harness, llm: FakeOpenAI
) -> None:
    details = await refused(engine, _request("too-many", 3))

    assert details.startswith("messages[0].content[3]: a run may send at most 2 image and")
    assert "max_media_parts" in details
    assert llm.requests == []


async def test_get_agent_names_what_each_model_takes_and_its_tools_with_their_schemas(
    engine: Harness,
) -> None:
    default = await engine.stub.GetAgent(pb.GetAgentRequest(name="agentik"))
    reader = await engine.stub.GetAgent(pb.GetAgentRequest(name="reader"))

    assert list(default.input_modalities) == ["text", "image"]
    assert list(reader.input_modalities) == ["text"]
    (spec,) = reader.tool_specs
    assert spec.name == "calculate" and spec.description
    assert "expression" in json.dumps(json_format.MessageToDict(spec.parameters))
    assert reader.max_tool_rounds == 8


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ('["image"]', 'must include "text"'),
        ('["text", "smell"]', "'smell' is not a modality"),
        ('"text"', "must be an array"),
    ],
)
def test_a_bad_input_modalities_is_a_config_error(tmp_path: Path, value: str, why: str) -> None:
    path = tmp_path / "agentik.toml"
    path.write_text(f'[[agents]]\nname = "a"\ninput_modalities = {value}\n')
    with pytest.raises(ConfigError, match=why):
        load_settings(path, {})
    path.write_text(f"[llm]\ninput_modalities = {value}\n")
    with pytest.raises(ConfigError, match=why):
        load_settings(path, {})


def _document_request(session: str, document: pb.DocumentPart, agent: str) -> pb.RunRequest:
    parts = [
        pb.ContentPart(text=pb.TextPart(text="summarise this")),
        pb.ContentPart(document=document),
    ]
    return pb.RunRequest(
        session_id=session,
        create_session=True,
        agent=agent,
        messages=[pb.Message(role=pb.ROLE_USER, content=parts)],
    )


async def test_an_agent_that_reads_documents_sends_them_as_file_parts_and_refuses_images(
    engine: Harness, llm: FakeOpenAI
) -> None:
    pdf = pb.DocumentPart(data=b"%PDF-1.4", mime_type="application/pdf", filename="a.pdf")
    events = await run(engine, _document_request("pdf", pdf, "pdfs"))

    assert kinds(events)[-1] == "run_finished"
    (user,) = [m for m in llm.requests[-1]["messages"] if m["role"] == "user"]
    assert user["content"][1] == {
        "type": "file",
        "file": {"filename": "a.pdf", "file_data": "data:application/pdf;base64,JVBERi0xLjQ="},
    }
    details = await refused(engine, _request("pdf-image", 1, agent="pdfs"))
    assert "is an image part, and agent 'pdfs'" in details
    assert "takes text and document only" in details
    stored = await engine.stub.ListMessages(pb.ListMessagesRequest(session_id="pdf"))
    assert stored.messages[0].content[1].document == pdf


@pytest.mark.parametrize(
    ("document", "why"),
    [
        (pb.DocumentPart(), "needs data or a file_id"),
        (pb.DocumentPart(data=b"%PDF"), "mime_type is required with data"),
        (pb.DocumentPart(data=b"<html>", mime_type="text/html"), "is not a document type"),
        (pb.DocumentPart(file_id="a b"), "is not a provider file id"),
    ],
)
async def test_a_document_that_cannot_be_sent_is_invalid_argument(
    engine: Harness, document: pb.DocumentPart, why: str
) -> None:
    details = await refused(engine, _document_request("bad-doc", document, "pdfs"))

    assert details.startswith("messages[0].content[1].document") and why in details


async def test_a_document_for_an_agent_that_does_not_read_them_is_refused(
    engine: Harness,
) -> None:
    pdf = pb.DocumentPart(file_id="file-1")
    details = await refused(engine, _document_request("no-doc", pdf, ""))

    assert details.startswith("messages[0].content[1] is a document part, and agent 'agentik'")


async def test_a_run_naming_no_agent_on_a_text_only_agents_conversation_refuses_an_image(
    engine: Harness, llm: FakeOpenAI
) -> None:
    made = await engine.stub.CreateSession(pb.CreateSessionRequest(agent="reader"))
    request = _request(made.id, 1)
    request.create_session = False

    details = await refused(engine, request)

    assert details.startswith("messages[0].content[1] is an image part, and agent 'reader'")
    assert llm.requests == []
    stored = await engine.stub.ListMessages(pb.ListMessagesRequest(session_id=made.id))
    assert list(stored.messages) == []
