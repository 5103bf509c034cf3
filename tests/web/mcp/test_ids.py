"""``web_facade.mcp.ids``: which ids an MCP message may carry (the HTTP side:
``tests/web/mcp/test_http.py``; stdin: ``tests/mcp/test_stdio.py``)."""

from __future__ import annotations

from typing import Any

import pytest

from web_facade.mcp.ids import ID_PROBLEM, id_problem


@pytest.mark.parametrize("request_id", [-(2**63), 2**63, 10**40, 0, "x", ""])
def test_a_string_or_an_integer_of_any_size_is_an_id(request_id: int | str) -> None:
    assert id_problem({"jsonrpc": "2.0", "id": request_id, "method": "ping"}) is None


@pytest.mark.parametrize("request_id", [1.5, 1.0, -0.0, True, False, None, [1], {"a": 1}])
def test_a_request_with_any_other_id_is_refused(request_id: Any) -> None:
    assert id_problem({"jsonrpc": "2.0", "id": request_id, "method": "ping"}) == ID_PROBLEM


def test_a_notification_has_no_id_and_an_error_may_answer_null() -> None:
    assert id_problem({"jsonrpc": "2.0", "method": "notifications/initialized"}) is None
    error = {"code": -32700, "message": "parse error"}
    assert id_problem({"jsonrpc": "2.0", "id": None, "error": error}) is None
    assert id_problem({"jsonrpc": "2.0", "id": 1.5, "result": {}}) == ID_PROBLEM
