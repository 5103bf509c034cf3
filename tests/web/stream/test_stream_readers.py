"""``[web] stream_reader``: an engine stream read by a relay thread per stream
(``threads``) or by the worker's asyncio loop (``asyncio``), with the same guarantees.

The routes are run in both modes against the real engine; the asyncio relay's bounds,
resume and cancel against scripted calls are in ``test_aio_relay.py``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
from flask import Flask

from agentik.config import ConfigError, load_settings
from tests.web.agui.agui_reader import AguiReader, assert_well_formed, text
from web_facade.stream import relay
from web_facade.stream.aio_relay import AioRelay

MODES = ("threads", "asyncio")


@pytest.mark.parametrize("mode", MODES)
def test_an_agui_run_streams_whole_with_either_reader(
    mode: str, make_app: Callable[..., Flask], monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[str] = []
    for cls in (relay.EventRelay, AioRelay):
        init = cls.__init__

        def spy(self: Any, *args: Any, _init: Any = init, **kwargs: Any) -> None:
            made.append(type(self).__name__)
            _init(self, *args, **kwargs)

        monkeypatch.setattr(cls, "__init__", spy)
    client = make_app(AGENTIK_WEB_STREAM_READER=mode).test_client()
    body = {
        "threadId": f"agui-{uuid.uuid4().hex}",
        "runId": uuid.uuid4().hex,
        "messages": [{"id": "m1", "role": "user", "content": "[[chunks:30]] count to thirty"}],
    }
    response = client.post("/agui", json=body, buffered=False)
    assert response.status_code == 200, response.get_data()
    events = AguiReader(response.response).read_to_end()  # type: ignore[arg-type]
    assert_well_formed(events)
    assert text(events)
    assert made == ["EventRelay" if mode == "threads" else "AioRelay"]


@pytest.mark.parametrize("mode", MODES)
def test_a_refusal_is_an_http_error_before_the_stream_with_either_reader(
    mode: str, make_app: Callable[..., Flask]
) -> None:
    client = make_app(AGENTIK_WEB_STREAM_READER=mode).test_client()
    body = {
        "threadId": f"agui-{uuid.uuid4().hex}",
        "runId": uuid.uuid4().hex,
        "messages": [{"id": "m1", "role": "user", "content": "hi"}],
    }
    response = client.post("/agui/no-such-agent", json=body)
    assert response.status_code == 404, response.get_data()
    assert response.mimetype == "application/json"


def test_an_unknown_stream_reader_is_refused_by_name() -> None:
    with pytest.raises(ConfigError, match="AGENTIK_WEB_STREAM_READER"):
        load_settings(None, {"AGENTIK_WEB_STREAM_READER": "fibers"})
