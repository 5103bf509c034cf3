"""What an LLM endpoint's error answer means, in words a client can act on.

An HTTP error from an OpenAI-compatible endpoint becomes an ``LLMError`` whose message
names the provider's error code and a plain cause (a bad key, an unknown model, a bad
parameter, a context that is too long), never a bare "HTTP 400". The provider's own text
is passed on only scrubbed of URLs, hosts, addresses and anything like a key; the log
(``detail``) keeps all of it.

A context that is too long is recognised by OpenAI's code ``context_length_exceeded`` and
by the wordings of vLLM ("maximum context length"), llama.cpp ("exceeds the available
context size") and Ollama ("context length"): its code is ``llm_context_too_long``, which
the run answers with one compaction and a retry (``core.context``).
"""

from __future__ import annotations

import re

from engine_service.core.context import LLM_CONTEXT_ERROR
from engine_service.core.errors import LLMError

__all__ = ["RETRYABLE", "is_context_words", "provider_error", "scrub"]

RETRYABLE = frozenset({"llm_unavailable", "llm_rate_limited", "llm_server_error", "llm_timeout"})

_CONTEXT_WORDS = re.compile(
    r"context[_ ]length|maximum context|context (?:size|window)|prompt is too long"
    r"|too many tokens|reduce the length of the messages|exceeds? the (?:available )?context",
    re.IGNORECASE,
)
_SECRETS = re.compile(
    r"[A-Za-z][\w+.-]*://\S*"  # a URL
    r"|\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b"  # an IPv4 address
    r"|\[[0-9a-fA-F:]*:[0-9a-fA-F:]*\](?::\d+)?"  # a bracketed IPv6 address
    r"|\b[\w.-]+\.[A-Za-z]{2,}(?::\d+)?\b"  # a host name
    r"|\b[\w.-]+:\d{2,5}\b"  # host:port
    r"|\b(?:sk|pk|key|rk)-[\w-]+"  # an API key
    r"|\b[A-Za-z0-9_\-+/=]{24,}"  # a long token
    r"|\bBearer\s+\S+",
    re.IGNORECASE,
)
_CODE = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_MAX_TEXT = 200


def scrub(text: str) -> str:
    """``text`` without URLs, hosts, addresses or keys, on one line, at most 200 chars."""
    text = _SECRETS.sub("[...]", " ".join(text.split()))
    return text if len(text) <= _MAX_TEXT else text[:_MAX_TEXT].rstrip() + " [...]"


def is_context_words(text: str) -> bool:
    """Whether ``text`` says the context (window) is exceeded, as servers word it."""
    return _CONTEXT_WORDS.search(text) is not None


def provider_error(status: int, code: str, text: str, detail: str) -> LLMError:
    """The ``LLMError`` for an endpoint's HTTP ``status`` with its error ``code`` and
    ``text`` (both may be empty); ``detail`` is what the log gets."""
    code = code if _CODE.fullmatch(code) else ""
    said = scrub(text)
    named = f" ({code})" if code else f" (HTTP {status})"
    tail = f": {said}" if said else ""
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
            f"the LLM endpoint {cause}{named}{tail}; check [llm] api_key (OPENAI_API_KEY)",
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
            "[llm] model (AGENTIK_MODEL) and base_url (OPENAI_BASE_URL)",
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
