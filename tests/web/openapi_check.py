"""Holds real responses against web_facade/openapi.json, strictly.

Every object schema of the document is checked with ``additionalProperties: false`` added,
so a field the server sends but the document does not describe fails the test.
"""

from __future__ import annotations

import copy
import json
import re
from functools import cache
from importlib import resources
from typing import Any

from jsonschema import Draft202012Validator

__all__ = ["DOCUMENT", "assert_event_conforms", "assert_response_conforms", "operation"]

DOCUMENT: dict[str, Any] = json.loads(
    resources.files("web_facade").joinpath("openapi.json").read_text("utf-8")
)


def _strict(node: Any) -> Any:
    if isinstance(node, dict):
        out = {k: _strict(v) for k, v in node.items()}
        if "properties" in out and "additionalProperties" not in out:
            out["additionalProperties"] = False
        return out
    if isinstance(node, list):
        return [_strict(v) for v in node]
    return node


_COMPONENTS = _strict(copy.deepcopy(DOCUMENT["components"]))


@cache
def _validator(pointer: str) -> Draft202012Validator:
    return Draft202012Validator({"$ref": pointer, "components": _COMPONENTS})


def _validate(schema: dict[str, Any], instance: Any) -> None:
    validator = Draft202012Validator({**_strict(schema), "components": _COMPONENTS})
    errors = sorted(validator.iter_errors(instance), key=lambda e: list(e.path))
    assert not errors, "; ".join(f"{list(e.path)}: {e.message}" for e in errors[:5])


def _template_regex(template: str) -> re.Pattern[str]:
    return re.compile("^" + re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(template)) + "$")


def operation(method: str, path: str) -> dict[str, Any]:
    """The operation of the document that serves ``method path`` (a concrete path)."""
    for template, item in DOCUMENT["paths"].items():
        if _template_regex(template).match(path) and method.lower() in item:
            found: dict[str, Any] = item[method.lower()]
            return found
    raise AssertionError(f"{method} {path} is not in the OpenAPI document")


def _resolve(node: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node and node["$ref"].startswith("#/components/responses/"):
        node = DOCUMENT["components"]["responses"][node["$ref"].rsplit("/", 1)[1]]
    return node


def assert_response_conforms(
    method: str, path: str, status: int, content_type: str, body: bytes
) -> None:
    """The response is documented for this operation and status, and its body fits."""
    responses = operation(method, path)["responses"]
    assert str(status) in responses, f"{method} {path} → {status} is not documented"
    documented = _resolve(responses[str(status)])
    media = content_type.split(";", 1)[0].strip()
    content = documented.get("content")
    if content is None:
        assert body == b"", f"{status} must have no body"
        return
    assert media in content, f"{method} {path} → {status}: {media} is not documented"
    if media == "application/json":
        _validate(content[media]["schema"], json.loads(body))


def assert_event_conforms(data: dict[str, Any]) -> None:
    """One SSE frame's data fits ``AgentikEvent``."""
    errors = list(_validator("#/components/schemas/AgentikEvent").iter_errors(data))
    assert not errors, f"{data['type']}: {errors[0].message}"
