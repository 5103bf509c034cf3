"""``python -m tests.faults.dies_after_an_end``: the engine (``agentik engine``, its settings
from the environment, a SQLite store) killed by SIGKILL the moment it has stored a run's
end, before it does anything after that write: the crash a run's webhooks must survive.

The SQLite store's ``finish_run`` is made to send the process SIGKILL once its transaction
is committed; nothing else of the engine changes."""

from __future__ import annotations

import os
import signal
from typing import Any

from agentik.cli import main
from engine_service.stores import SqliteSessionStore

_finish_run = SqliteSessionStore.finish_run


async def _finish_run_and_die(self: SqliteSessionStore, /, *args: Any, **kwargs: Any) -> None:
    await _finish_run(self, *args, **kwargs)
    os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    SqliteSessionStore.finish_run = _finish_run_and_die  # type: ignore[method-assign,assignment]
    raise SystemExit(main(["engine"]))
