"""The OpenAPI document is served, well formed, and describes exactly the routes the app has."""

from __future__ import annotations

import re

from flask import Flask
from jsonschema import Draft202012Validator

from tests.web.conftest import ApiClient
from tests.web.openapi_check import DOCUMENT


def test_the_document_is_served_as_openapi_3_1(api: ApiClient) -> None:
    response = api.call("GET", "/agentik/openapi.json")
    assert response.status_code == 200
    assert response.get_json() == DOCUMENT
    assert DOCUMENT["openapi"].startswith("3.1")


def test_every_schema_of_the_document_is_valid_json_schema() -> None:
    for schema in DOCUMENT["components"]["schemas"].values():
        Draft202012Validator.check_schema(schema)


def test_the_document_describes_exactly_the_agentik_and_health_routes(app: Flask) -> None:
    routed = set()
    for rule in app.url_map.iter_rules():
        if not rule.rule.startswith(("/agentik/", "/health")):
            continue  # other facades (AG-UI, A2A) document themselves
        path = re.sub(r"<(?:[^:>]+:)?([^>]+)>", "{id}", rule.rule)
        for method in rule.methods or ():
            if method not in ("HEAD", "OPTIONS"):
                routed.add((method.lower(), path))
    documented = {
        (method, path)
        for path, item in DOCUMENT["paths"].items()
        for method in item
        if method != "parameters"
    }
    assert routed == documented
