"""Is the LLM endpoint there, and does it serve the configured model? Found at start, not at
the first message.

``probe_llm`` asks ``GET {base_url}/models`` (OpenAI, Ollama, vLLM, llama.cpp and LM Studio
all serve it) and says one of:

- ``ok``: the endpoint answered and lists the model, or has no ``/models`` to ask (then the
  model is not checked: ``detail`` says so);
- ``unreachable``: no connection, a timeout, or a server error;
- ``unknown model``: the endpoint lists models, and not the configured one;
- ``unauthorized``: the endpoint refused the API key (401/403).

The built-in offline model is ``offline``; before the first answer, ``checking``.
``LlmWatch`` runs the probe at start and every ``interval`` seconds, logging each change; the
engine's health answer carries its state (``engine_service.server``), so ``/health`` and the
start-up lines report it. A probe never fails the start.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from engine_service.core.chat import ChatModel
from engine_service.llm.http import HttpClient, HttpError
from engine_service.llm.openai_chat import OpenAIChatModel

__all__ = [
    "CHECKING",
    "OFFLINE",
    "OK",
    "UNAUTHORIZED",
    "UNKNOWN_MODEL",
    "UNREACHABLE",
    "LlmStatus",
    "LlmWatch",
    "probe_llm",
]

log = logging.getLogger(__name__)

OK = "ok"
UNREACHABLE = "unreachable"
UNKNOWN_MODEL = "unknown model"
UNAUTHORIZED = "unauthorized"
OFFLINE = "offline"
CHECKING = "checking"

PROBE_TIMEOUT = 5.0
"""Seconds one ``GET /models`` may take."""

_LISTED = 8
"""How many of the endpoint's models an ``unknown model`` detail names."""

_MAX_LIST_BYTES = 4 * 1024 * 1024
"""Bytes of a ``/models`` answer read (a long list of models fits; more is not a list)."""


@dataclass(frozen=True, slots=True)
class LlmStatus:
    """The state, what was seen (for logs and ``agentik doctor``) and how to fix it."""

    state: str
    detail: str = ""
    fix: str = ""

    @property
    def ok(self) -> bool:
        return self.state in (OK, OFFLINE)


def redacted(url: str) -> str:
    """``url`` without the credentials it may carry."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    return urlunsplit(parts._replace(netloc=f"{host}:{parts.port}" if parts.port else host))


async def probe_llm(
    base_url: str, api_key: str | None, model: str, *, within: float = PROBE_TIMEOUT
) -> LlmStatus:
    """One ``GET {base_url}/models``, judged (see the module)."""
    where = redacted(base_url.rstrip("/"))
    headers = {"Authorization": f"Bearer {api_key or 'not-needed'}"}  # as the model sends
    # The engine's own HTTP client (engine_service.llm.http), not httpx: the probe is the
    # only GET the engine makes, and importing httpx would cost the idle engine ~7 MB.
    client = HttpClient(connect_timeout=within, read_timeout=within)
    try:
        async with asyncio.timeout(within):
            response = await client.get(f"{base_url.rstrip('/')}/models", headers=headers)
            try:
                body = await response.read_all(_MAX_LIST_BYTES)
            finally:
                await response.aclose()
    except (HttpError, TimeoutError) as exc:
        reason = str(exc) or type(exc).__name__
        return LlmStatus(
            UNREACHABLE,
            f"{where}: {reason}",
            "start the LLM server, or set OPENAI_BASE_URL to where it listens "
            "(OpenAI-compatible servers usually end in /v1)",
        )
    finally:
        await client.aclose()
    return _judge(response.status, body, where, model)


def _judge(status: int, body: bytes, where: str, model: str) -> LlmStatus:
    if status in (401, 403):
        return LlmStatus(
            UNAUTHORIZED,
            f"{where} refused the API key (HTTP {status})",
            "set OPENAI_API_KEY to a key this endpoint accepts",
        )
    if status >= 500:
        return LlmStatus(
            UNREACHABLE, f"{where} answered HTTP {status}", "check the LLM server's own logs"
        )
    if status >= 300:  # no /models here (404, 405, a redirect): the model cannot be checked
        return LlmStatus(OK, f"{where} has no /models (HTTP {status}); {model!r} not checked")
    names = _model_names(body)
    if names is None:
        return LlmStatus(OK, f"{where}/models is not a model list; {model!r} not checked")
    if model in names:
        return LlmStatus(OK, f"{where} serves {model!r}")
    shown = ", ".join(sorted(names)[:_LISTED]) or "none"
    more = f" and {len(names) - _LISTED} more" if len(names) > _LISTED else ""
    return LlmStatus(
        UNKNOWN_MODEL,
        f"{where} does not list the model {model!r}; it lists: {shown}{more}",
        "set AGENTIK_MODEL (or [llm] model) to one of the listed models",
    )


def _model_names(raw: bytes) -> list[str] | None:
    """The ids of an OpenAI ``{"data": [{"id": ...}]}`` list, or None if it is not one."""
    try:
        body = json.loads(raw)
    except ValueError:  # not JSON, not UTF-8, or cut at _MAX_LIST_BYTES
        return None
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list):
        return None
    return [str(item["id"]) for item in data if isinstance(item, dict) and "id" in item]


class LlmWatch:
    """The LLM endpoint's state, probed at start and every ``interval`` seconds (0: once)."""

    def __init__(self, model: ChatModel, interval: float, api_key: str | None) -> None:
        self._model = model
        self._interval = interval
        self._api_key = api_key
        probed = isinstance(model, OpenAIChatModel)
        self.status = LlmStatus(CHECKING if probed else OFFLINE)
        self._task: asyncio.Task[None] | None = None
        self._first = asyncio.Event()
        if not probed:
            self._first.set()

    @property
    def state(self) -> str:
        return self.status.state

    def start(self) -> None:
        if isinstance(self._model, OpenAIChatModel) and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._watch(self._model))

    async def wait_first(self, within: float) -> LlmStatus:
        """The first probe's answer, or ``checking`` if it takes longer than ``within``."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._first.wait(), within)
        return self.status

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _watch(self, model: OpenAIChatModel) -> None:
        while True:
            status = await probe_llm(model.base_url, self._api_key, model.model)
            if status.state != self.status.state:
                _log_change(status)
            self.status = status
            self._first.set()
            if self._interval <= 0:
                return
            await asyncio.sleep(self._interval)


def _log_change(status: LlmStatus) -> None:
    if status.ok:
        log.info("llm: %s (%s)", status.state, status.detail)
    else:
        log.warning("llm: %s: %s; fix: %s", status.state, status.detail, status.fix)
