"""A property-based run over web_facade/openapi.json: schemathesis generates requests for
every operation (valid ones and ones the document forbids) and sends them to the real facade
(in process, over WSGI) on a real engine with the fake LLM.

No response may be a server error, and every response must be documented: its status code,
its content type, its headers and its body (JSON bodies strictly, as ``openapi_check`` holds
them; each SSE event's ``data`` against ``AgentikEvent``).

Bounded: derandomized (a fixed seed), :data:`EXAMPLES` per operation. Half the requests aim
at a conversation that exists (made for the example), so ``send`` streams real turns and
``events`` real streams. ``events`` without ``until_idle`` is live and never ends: its body
is read for :data:`LIVE_STREAM_READ` seconds, then the stream is closed.

Twice: on an open engine, and on one with tokens where each request carries alice's token,
bob's, a wrong one or none while the conversations made for it are alice's — so 401s and
the not-found another caller gets are held to the document too.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from flask import Flask
from flask.testing import FlaskClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import APIOperation, BaseSchema, Case, GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.fakes.fake_openai import FakeOpenAI
from tests.web.conftest import WAIT, BackgroundEngine, engine_settings, web_settings
from tests.web.openapi_check import DOCUMENT, assert_response_conforms
from web_facade import create_app
from web_facade.engine_client import EngineClient

EXAMPLES = 40
"""Generated requests per operation (and generation mode)."""
LIVE_STREAM_READ = 0.5
"""Seconds a live ``events`` stream is read before the client closes it."""
FuzzCase = Case[APIOperation[Any, Any, Any, Any]]

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]


TOKENS = {"alice": "fuzz-alice-token", "bob": "fuzz-bob-token"}
CREDENTIALS: list[str | None] = [
    f"Bearer {TOKENS['alice']}",
    f"Bearer {TOKENS['bob']}",
    "Bearer not-a-token",
    None,
]


@pytest.fixture(scope="module", params=["open", "tokens"])
def fuzz_app(request: pytest.FixtureRequest, llm: FakeOpenAI) -> Iterator[Flask]:
    """The facade on an engine of its own, so the run's conversations stay out of the way."""
    env = {}
    if request.param == "tokens":
        env["AGENTIK_TOKENS"] = ",".join(f"{name}:{token}" for name, token in TOKENS.items())
    engine = BackgroundEngine(engine_settings(llm, **env))
    target = engine.start()
    client = EngineClient(target)
    app = create_app(web_settings(target), client)
    app.testing = True
    app.config["FUZZ_AUTH"] = request.param == "tokens"
    yield app
    client.close()
    engine.stop()


@pytest.fixture(scope="module")
def fuzz_schema(fuzz_app: Flask) -> BaseSchema:
    """The document as the app serves it; schemathesis sends its requests to the app."""
    return schemathesis.openapi.from_wsgi("/agentik/openapi.json", fuzz_app)


OPERATIONS = [
    (method.upper(), path)
    for path, item in DOCUMENT["paths"].items()
    for method in item
    if method != "parameters"
]


def _new_conversation(client: FlaskClient, headers: dict[str, str]) -> str:
    response = client.post("/agentik/conversations", json={}, headers=headers)
    assert response.status_code == 201, response.get_data()
    conversation_id: str = response.get_json()["id"]
    return conversation_id


def _is_live_stream(case: FuzzCase) -> bool:
    if case.operation.path != "/agentik/conversations/{id}/events":
        return False
    until_idle = str((case.query or {}).get("until_idle", "")).strip().lower()
    return until_idle not in ("true", "1", "yes")


@pytest.mark.parametrize(("method", "path"), OPERATIONS, ids=[f"{m} {p}" for m, p in OPERATIONS])
def test_every_operation_answers_as_documented_and_never_with_a_server_error(
    method: str, path: str, fuzz_schema: BaseSchema, fuzz_app: Flask
) -> None:
    operation = fuzz_schema[path][method]
    cases = st.one_of(
        operation.as_strategy(GenerationMode.POSITIVE),
        operation.as_strategy(GenerationMode.NEGATIVE),
    )
    client = fuzz_app.test_client()

    with_auth = bool(fuzz_app.config["FUZZ_AUTH"])
    alice = {"Authorization": f"Bearer {TOKENS['alice']}"} if with_auth else {}
    credentials = st.sampled_from(CREDENTIALS) if with_auth else st.just(None)

    @given(case=cases, existing=st.booleans(), authorization=credentials)
    @settings(
        max_examples=EXAMPLES,
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def run(case: FuzzCase, existing: bool, authorization: str | None) -> None:
        if existing and case.path_parameters and "id" in case.path_parameters:
            case.path_parameters["id"] = _new_conversation(client, alice)
        if authorization is not None:
            case.headers["Authorization"] = authorization
        timeout = LIVE_STREAM_READ if _is_live_stream(case) else WAIT
        response = case.call_and_validate(checks=CHECKS, timeout=timeout)
        content_type = response.headers.get("content-type", [""])[0]
        if not content_type.startswith("text/event-stream"):
            assert_response_conforms(
                method, case.formatted_path, response.status_code, content_type, response.content
            )

    run()
