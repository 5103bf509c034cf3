"""The core's exception tree. Each boundary maps it through one table.

::

    AgentikError                 base; ``code`` is a stable snake_case name
    ├── InvalidInput             the request is malformed (names the field)
    │   └── ContextTooLong       a new message alone is larger than the model's budget
    ├── SessionNotFound          no such session
    ├── AlreadyExists            an id the caller chose is taken
    ├── SessionBusy              the session already has a run in flight
    ├── InputRequired            the session waits for a person's answer (resume it)
    ├── Overloaded               the engine is at its concurrent-run limit
    ├── RateLimited              the caller is over one of its own limits (retry later)
    ├── BudgetExceeded           the caller used its tokens of the day (retry after reset)
    ├── QuotaExceeded            the caller holds all the conversations it may (delete some)
    ├── Unauthenticated          no valid credentials
    ├── ShuttingDown             the engine takes no new runs
    ├── RunNotFound              no such run in the session
    ├── LLMError                 the LLM call failed (code says how)
    └── StorageUnavailable       the store cannot read or write (disk full, locked, ...)
"""

from __future__ import annotations

from datetime import datetime

__all__ = [
    "AgentikError",
    "AlreadyExists",
    "BudgetExceeded",
    "ContextTooLong",
    "Forbidden",
    "InputRequired",
    "InvalidInput",
    "LLMError",
    "Overloaded",
    "PushConfigNotFound",
    "QuotaExceeded",
    "RateLimited",
    "RunNotFound",
    "SessionBusy",
    "SessionNotFound",
    "ShuttingDown",
    "StorageUnavailable",
    "Unauthenticated",
]


class AgentikError(Exception):
    """Base of every error the core raises on purpose."""

    code = "internal"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidInput(AgentikError):
    code = "invalid_argument"


class ContextTooLong(InvalidInput):
    """A new message that alone does not fit the model's context budget (``core.context``);
    a run whose conversation cannot be made to fit ends with RUN_ERROR of this code."""

    code = "context_too_long"


class Forbidden(AgentikError):
    """The caller is known but may not do this (an admin's call by someone who is not)."""

    code = "forbidden"


class SessionNotFound(AgentikError):
    code = "not_found"

    def __init__(self, session_id: str) -> None:
        super().__init__(f"session {session_id!r} not found")
        self.session_id = session_id


class RunNotFound(AgentikError):
    code = "not_found"

    def __init__(self, run_id: str) -> None:
        super().__init__(f"run {run_id!r} not found")
        self.run_id = run_id


class PushConfigNotFound(AgentikError):
    code = "not_found"

    def __init__(self, task_id: str, config_id: str) -> None:
        super().__init__(f"push notification config {config_id!r} of task {task_id!r} not found")


class AlreadyExists(AgentikError):
    code = "already_exists"


class SessionBusy(AgentikError):
    code = "busy"

    def __init__(self, session_id: str, run_id: str) -> None:
        super().__init__(
            f"session {session_id!r} is busy with run {run_id!r}; interrupt it or wait"
        )
        self.session_id = session_id
        self.run_id = run_id


class InputRequired(AgentikError):
    """A run without ``resume`` on a session whose interrupts await a person."""

    code = "input_required"


class Overloaded(AgentikError):
    code = "overloaded"


class RateLimited(AgentikError):
    """The caller is over a per-caller limit (requests per minute, concurrent runs);
    ``retry_after`` is the whole number of seconds after which a retry may pass."""

    code = "rate_limited"

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = max(1, retry_after)


class BudgetExceeded(AgentikError):
    """The caller used its tokens of the day (``[auth] tokens_per_day``). ``resets_at`` is
    the UTC midnight when the count starts again; ``retry_after`` the whole seconds until
    then."""

    code = "budget_exceeded"

    def __init__(self, message: str, resets_at: datetime, retry_after: int) -> None:
        super().__init__(message)
        self.resets_at = resets_at
        self.retry_after = max(1, retry_after)


class QuotaExceeded(AgentikError):
    """The caller holds as many conversations as it may (``[auth] max_sessions_per_caller``):
    a new one is refused until it deletes some. Waiting does not help, so no retry time."""

    code = "quota_exceeded"


class Unauthenticated(AgentikError):
    """The request carries no credentials, or ones that are not valid. The message says
    which, never what a valid token looks like; ``presented`` tells the two apart."""

    code = "unauthenticated"

    def __init__(self, message: str, *, presented: bool) -> None:
        super().__init__(message)
        self.presented = presented


class ShuttingDown(AgentikError):
    code = "unavailable"

    def __init__(self) -> None:
        super().__init__("the engine is shutting down and takes no new runs")


class LLMError(AgentikError):
    """An LLM failure. ``code`` is one of the RUN_ERROR codes the contract lists.

    ``message`` is what the client is told: what failed, never where (no URL, host or
    exception class). ``detail`` is for the engine log: the endpoint and the cause."""

    def __init__(
        self, code: str, message: str, *, retryable: bool = False, detail: str = ""
    ) -> None:
        super().__init__(message)
        self.code = code
        self.retryable = retryable
        self.detail = detail or message


class StorageUnavailable(AgentikError):
    """The store failed for a reason outside the request: ``message`` names the cause in
    words a client can act on (the disk is full, the database is locked), never a class."""

    code = "storage_unavailable"
