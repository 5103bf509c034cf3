"""``web_facade.gunicorn_worker.QuietAccessLogger``: gunicorn's access line is made only
while its logger takes it (agentik's config turns ``gunicorn.access`` off: the access log
is the app's)."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from gunicorn.config import Config  # type: ignore[import-untyped]

from web_facade.gunicorn_worker import QuietAccessLogger


def _logger(level: int) -> tuple[QuietAccessLogger, list[Any]]:
    # Not made by its constructor, which would configure the process's logging.
    logger = QuietAccessLogger.__new__(QuietAccessLogger)
    logger.cfg = Config()
    logger._access_log_enabled = True  # as gunicorn sets it, given a logconfig_dict
    logger.access_log = logging.getLogger(f"tests.quiet_access.{level}")
    logger.access_log.setLevel(level)
    logger.access_log.propagate = False
    made: list[Any] = []

    def atoms(*args: Any) -> dict[str, str]:
        made.append(args)
        return {}

    logger.atoms = atoms
    return logger, made


def test_no_access_line_is_made_while_the_access_logger_is_off() -> None:
    logger, made = _logger(logging.CRITICAL)
    logger.access(object(), object(), {}, timedelta(seconds=0.01))
    assert made == []


def test_the_access_line_is_made_when_the_access_logger_takes_it() -> None:
    logger, made = _logger(logging.INFO)
    logger.access(object(), object(), {}, timedelta(seconds=0.01))
    assert len(made) == 1
