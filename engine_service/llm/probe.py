"""Is each LLM endpoint there, and does it serve the configured model? Found at start, not
at the first message.

``probe_llm`` asks ``GET {base_url}/models`` (OpenAI, Ollama, vLLM, llama.cpp and LM Studio
all serve it) and says one of:

- ``ok``: the endpoint answered and lists the model;
- ``model not checked`` (a warning): the endpoint has no ``/models`` (404 and the like) or
  its answer is not a model list, so the model cannot be checked; a base URL that is not the
  API's base (``.../v1``) looks the same;
- ``unreachable``: no connection, a timeout, or a server error;
- ``unknown model``: the endpoint lists models, and not the configured one;
- ``unauthorized``: the endpoint refused the API key (401/403).

Each fix names the settings of the model it checked (``[llm]``'s, or an agent's,
``llm.refusals.SettingNames``). The built-in offline model is ``offline``; before the first
answer, ``checking``. ``LlmWatch`` probes every distinct endpoint and model of the engine's
agents (``llm_targets``) at start and every ``interval`` seconds, logging each change; the
engine's health answer carries one state for them all (``LlmWatch.status``), so ``/health``
and the start-up lines report it. A probe never fails the start.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from engine_service.core.agents import Agents
from engine_service.llm.http import HttpClient, HttpError
from engine_service.llm.openai_chat import OpenAIChatModel
from engine_service.llm.refusals import LLM_SETTINGS, SettingNames

__all__ = [
    "CHECKING",
    "OFFLINE",
    "OK",
    "UNAUTHORIZED",
    "UNCHECKED",
    "UNKNOWN_MODEL",
    "UNREACHABLE",
    "LlmStatus",
    "LlmTarget",
    "LlmWatch",
    "llm_targets",
    "probe_llm",
    "probe_target",
]

log = logging.getLogger(__name__)

OK = "ok"
UNREACHABLE = "unreachable"
UNKNOWN_MODEL = "unknown model"
UNAUTHORIZED = "unauthorized"
OFFLINE = "offline"
CHECKING = "checking"
UNCHECKED = "model not checked"

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

    @property
    def failed(self) -> bool:
        """Something is wrong (not ok, not a warning, not still checking)."""
        return self.state not in (OK, OFFLINE, UNCHECKED, CHECKING)


def redacted(url: str) -> str:
    """``url`` without the credentials it may carry."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    return urlunsplit(parts._replace(netloc=f"{host}:{parts.port}" if parts.port else host))


async def probe_llm(
    base_url: str,
    api_key: str | None,
    model: str,
    *,
    headers: Mapping[str, str] | None = None,
    names: SettingNames = LLM_SETTINGS,
    within: float = PROBE_TIMEOUT,
) -> LlmStatus:
    """One ``GET {base_url}/models`` with the key (and ``headers``, which win), judged (see
    the module); ``names``: the settings a fix names."""
    where = redacted(base_url.rstrip("/"))
    # As the model sends them: the key (any, for local servers), an agent's own headers.
    sent = {"Authorization": f"Bearer {api_key or 'not-needed'}", **(headers or {})}
    # The engine's own HTTP client (engine_service.llm.http), not httpx: the probe is the
    # only GET the engine makes, and importing httpx would cost the idle engine ~7 MB.
    client = HttpClient(connect_timeout=within, read_timeout=within)
    try:
        async with asyncio.timeout(within):
            response = await client.get(f"{base_url.rstrip('/')}/models", headers=sent)
            try:
                body = await response.read_all(_MAX_LIST_BYTES)
            finally:
                await response.aclose()
    except (HttpError, TimeoutError) as exc:
        reason = str(exc) or type(exc).__name__
        return LlmStatus(
            UNREACHABLE,
            f"{where}: {reason}",
            f"start the LLM server, or set {names.base_url} to where it listens "
            "(OpenAI-compatible servers usually end in /v1)",
        )
    finally:
        await client.aclose()
    return _judge(response.status, body, where, model, names)


async def probe_target(target: LlmTarget, *, within: float = PROBE_TIMEOUT) -> LlmStatus:
    """``probe_llm`` of one target, with its model's key, headers and settings' names."""
    model = target.model
    return await probe_llm(
        model.base_url,
        None,
        model.model,
        headers=model.auth_headers,
        names=model.settings,
        within=within,
    )


def _judge(status: int, body: bytes, where: str, model: str, names: SettingNames) -> LlmStatus:
    if status in (401, 403):
        return LlmStatus(
            UNAUTHORIZED,
            f"{where} refused the API key (HTTP {status})",
            f"set {names.api_key} to a key this endpoint accepts",
        )
    if status >= 500:
        return LlmStatus(
            UNREACHABLE, f"{where} answered HTTP {status}", "check the LLM server's own logs"
        )
    unchecked = (
        f"if messages fail with not_found, {names.base_url} is not the API's base: it "
        "usually ends in /v1, before /chat/completions"
    )
    if status >= 300:  # no /models here (404, 405, a redirect): the model cannot be checked
        detail = f"{where} has no /models (HTTP {status}): {model!r} cannot be checked"
        return LlmStatus(UNCHECKED, detail, unchecked)
    names_listed = _model_names(body)
    if names_listed is None:
        detail = f"{where}/models is not a model list: {model!r} cannot be checked"
        return LlmStatus(UNCHECKED, detail, unchecked)
    if model in names_listed:
        return LlmStatus(OK, f"{where} serves {model!r}")
    shown = ", ".join(sorted(names_listed)[:_LISTED]) or "none"
    more = f" and {len(names_listed) - _LISTED} more" if len(names_listed) > _LISTED else ""
    return LlmStatus(
        UNKNOWN_MODEL,
        f"{where} does not list the model {model!r}; it lists: {shown}{more}",
        f"set {names.model} to one of the listed models",
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


@dataclass(frozen=True, slots=True)
class LlmTarget:
    """One endpoint and model to check, and the agents whose model it is."""

    model: OpenAIChatModel
    agents: tuple[str, ...]
    default: bool
    """The default agent's model (its lines are plain ``llm``)."""

    @property
    def label(self) -> str:
        """How logs and ``agentik doctor`` name it: ``llm``, or ``llm (agent 'researcher')``."""
        if self.default:
            return "llm"
        listed = ", ".join(repr(name) for name in self.agents)
        return f"llm (agent{'s' * (len(self.agents) > 1)} {listed})"


def llm_targets(agents: Agents) -> list[LlmTarget]:
    """Each distinct endpoint, model and key of ``agents`` (the default agent's first); the
    built-in offline model has none."""
    found: dict[tuple[object, ...], tuple[OpenAIChatModel, list[str]]] = {}
    for profile in sorted(agents, key=lambda p: p.name != agents.default):
        model = profile.model
        if isinstance(model, OpenAIChatModel):
            key = (model.base_url, model.model, tuple(sorted(model.auth_headers.items())))
            found.setdefault(key, (model, []))[1].append(profile.name)
    return [
        LlmTarget(model, tuple(names), agents.default in names) for model, names in found.values()
    ]


class LlmWatch:
    """The LLM endpoints' states, probed at start and every ``interval`` seconds (0: once)."""

    def __init__(self, targets: Sequence[LlmTarget], interval: float) -> None:
        self._targets = list(targets)
        self._interval = interval
        self.statuses = [LlmStatus(CHECKING) for _ in self._targets]
        """Each target's last answer, in the targets' order."""
        self._task: asyncio.Task[None] | None = None
        self._first = asyncio.Event()
        if not self._targets:
            self._first.set()

    @classmethod
    def of(cls, agents: Agents, interval: float) -> LlmWatch:
        """The watch of every agent's endpoint (``llm_targets``)."""
        return cls(llm_targets(agents), interval)

    @property
    def status(self) -> LlmStatus:
        """One state for them all: the first failure (the default agent's first), else
        ``checking`` while one has not answered, else the first warning, else ``ok``;
        ``offline`` when no agent has an endpoint."""
        if not self.statuses:
            return LlmStatus(OFFLINE)
        failed = [s for s in self.statuses if s.failed]
        checking = [s for s in self.statuses if s.state == CHECKING]
        warned = [s for s in self.statuses if not s.ok]
        return (failed or checking or warned or self.statuses)[0]

    @property
    def state(self) -> str:
        return self.status.state

    def start(self) -> None:
        if self._targets and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._watch())

    async def wait_first(self, within: float) -> LlmStatus:
        """The first probes' answer, or ``checking`` if they take longer than ``within``."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._first.wait(), within)
        return self.status

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _watch(self) -> None:
        while True:
            statuses = await asyncio.gather(*(probe_target(t) for t in self._targets))
            for target, old, new in zip(self._targets, self.statuses, statuses, strict=True):
                if new.state != old.state:
                    _log_change(target.label, new)
            self.statuses = list(statuses)
            self._first.set()
            if self._interval <= 0:
                return
            await asyncio.sleep(self._interval)


def _log_change(label: str, status: LlmStatus) -> None:
    if status.ok:
        log.info("%s: %s (%s)", label, status.state, status.detail)
    else:
        log.warning("%s: %s: %s; fix: %s", label, status.state, status.detail, status.fix)
