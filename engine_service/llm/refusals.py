"""What an LLM endpoint's error answer means, in words a client can act on.

An HTTP error from an OpenAI-compatible endpoint becomes an ``LLMError`` whose message
names the provider's error code (and the parameter it names) and a plain cause (a bad
key, an unknown model, a bad parameter, a context that is too long), never a bare "HTTP
400". The provider's own text is not passed on (it may hold URLs, hosts, account ids or
part of a key); the log (``detail``) keeps all of it.

A context that is too long is recognised by OpenAI's code ``context_length_exceeded`` and
by the wordings of vLLM ("maximum context length"), llama.cpp ("exceeds the available
context size") and Ollama ("context length"): its code is ``llm_context_too_long``, which
the run answers with one compaction and a retry (``core.context``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from engine_service.core.context import LLM_CONTEXT_ERROR
from engine_service.core.errors import LLMError

__all__ = ["LLM_SETTINGS", "RETRYABLE", "SettingNames", "is_context_words", "provider_error"]


@dataclass(frozen=True, slots=True)
class SettingNames:
    """How a message names the settings behind one model: ``[llm]``'s, or those of the
    ``[[agents]]`` entry that has its own endpoint or model."""

    base_url: str = "[llm] base_url (OPENAI_BASE_URL)"
    api_key: str = "[llm] api_key (OPENAI_API_KEY)"
    model: str = "[llm] model (AGENTIK_MODEL)"

    @classmethod
    def of_agent(cls, name: str, *, own_endpoint: bool, own_model: bool) -> SettingNames:
        """An agent's: its own keys where it has them, ``[llm]``'s where not."""
        own, llm = f"[[agents]] {name!r}", LLM_SETTINGS
        return cls(
            base_url=f"{own} base_url" if own_endpoint else llm.base_url,
            api_key=f"{own} api_key" if own_endpoint else llm.api_key,
            model=f"{own} model" if own_model else llm.model,
        )


LLM_SETTINGS = SettingNames()

RETRYABLE = frozenset({"llm_unavailable", "llm_rate_limited", "llm_server_error", "llm_timeout"})

_CONTEXT_WORDS = re.compile(
    r"context[_ ]length|maximum context|context (?:size|window)|prompt is too long"
    r"|too many tokens|reduce the length of the messages|exceeds? the (?:available )?context",
    re.IGNORECASE,
)
_CODE = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}")
"""What a provider's error code or parameter name must look like to be passed on
(snake_case): anything else, a host or an address included, is left out."""


def is_context_words(text: str) -> bool:
    """Whether ``text`` says the context (window) is exceeded, as servers word it."""
    return _CONTEXT_WORDS.search(text) is not None


def provider_error(
    status: int,
    code: str,
    text: str,
    detail: str,
    param: str = "",
    names: SettingNames = LLM_SETTINGS,
) -> LLMError:
    """The ``LLMError`` for an endpoint's HTTP ``status`` with its error ``code``, ``text``
    and ``param`` (each may be empty); ``detail`` is what the log gets; ``names``: the
    settings a fix names (the agent's that made the call)."""
    code = code if _CODE.fullmatch(code) else ""
    param = param if _CODE.fullmatch(param) else ""
    named = f" ({code})" if code else f" (HTTP {status})"
    tail = f": parameter {param!r}" if param and param != "messages" else ""
    if code == "context_length_exceeded" or (400 <= status < 500 and _CONTEXT_WORDS.search(text)):
        return _error(
            LLM_CONTEXT_ERROR,
            f"the conversation is too long for the model{named}{tail}",
            detail,
        )
    if status in (401, 403) or code in ("invalid_api_key", "authentication_error"):
        cause = "refused the API key" if status == 401 else "does not let this key do that"
        return _error(
            "llm_auth",
            f"the LLM endpoint {cause}{named}{tail}; check {names.api_key}",
            detail,
        )
    if status == 429:
        cause = "the account is out of quota" if code == "insufficient_quota" else "rate limited"
        return _error("llm_rate_limited", f"the LLM endpoint: {cause}{named}{tail}", detail)
    if status >= 500:
        return _error("llm_server_error", f"the LLM endpoint failed{named}{tail}", detail)
    if status == 404 or code in ("model_not_found", "not_found"):
        return _error(
            "llm_bad_request",
            f"unknown model, or a base URL without the API's path{named}{tail}; check "
            f"{names.model} and {names.base_url}",
            detail,
        )
    if status == 413:
        return _error(
            "llm_bad_request", f"the request is too large for the LLM endpoint{named}{tail}", detail
        )
    cause = "the LLM refused a parameter of the request"
    return _error("llm_bad_request", f"{cause}{named}{tail}", detail)


def _error(code: str, message: str, detail: str) -> LLMError:
    return LLMError(code, message, retryable=code in RETRYABLE, detail=detail)
