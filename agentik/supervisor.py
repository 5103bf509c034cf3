"""``agentik serve``'s parent process with several engine workers, once the command has read
and checked the settings (with one, the serve process runs the engine itself and starts the
web workers: ``web_facade/serve_web.py``).

The command execs this module rather than supervising the engine and the web itself: a
process that has imported the settings, argparse and every sub-command's parser keeps about
25 MB resident for life; this one needs only :func:`agentik.parent_watch.supervise`
(about 11 MB, docs/performance.md "Idle memory"). What it runs and says comes in one
environment variable, which the children do not inherit.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping, Sequence
from typing import NoReturn

from agentik.parent_watch import supervise

__all__ = ["SPEC_ENV", "exec_supervisor", "main", "say"]

SPEC_ENV = "AGENTIK_SUPERVISE"


def exec_supervisor(
    commands: Sequence[Sequence[str]],
    env: Mapping[str, str],
    *,
    stop_timeout: float,
    started: str,
    stopping: str,
    log_format: str,
) -> NoReturn:
    """Replace this process with the supervisor of ``commands`` (same pid, so a parent
    watching it and the children's ``stop_with_parent`` are unaffected)."""
    spec = {
        "commands": [list(argv) for argv in commands],
        "stop_timeout": stop_timeout,
        "started": started,
        "stopping": stopping,
        "log_format": log_format,
    }
    sys.stdout.flush()
    sys.stderr.flush()
    argv = [sys.executable, "-m", "agentik.supervisor"]
    os.execve(argv[0], argv, {**env, SPEC_ENV: json.dumps(spec)})


def say(line: str, log_format: str) -> None:
    """``line`` on stderr, as a JSON log record when ``log_format`` is json."""
    if log_format == "json":  # every line on stderr is then JSON
        import logging

        from agentik.logs import JsonFormatter

        record = logging.LogRecord("agentik", logging.INFO, "", 0, line, None, None)
        line = JsonFormatter().format(record)
    print(line, file=sys.stderr, flush=True)


def main() -> int:
    raw = os.environ.pop(SPEC_ENV, "")
    if not raw:
        print("agentik.supervisor: started by `agentik serve`, not by hand", file=sys.stderr)
        return 2
    spec = json.loads(raw)
    log_format = str(spec["log_format"])
    return supervise(
        spec["commands"],
        dict(os.environ),
        stop_timeout=float(spec["stop_timeout"]),
        started=lambda: say(str(spec["started"]), log_format),
        stopping=lambda: say(str(spec["stopping"]), log_format),
    )


if __name__ == "__main__":
    raise SystemExit(main())
