"""Log output for the engine and the web facade: readable text, or JSON lines.

``[log] format = "json"`` (``AGENTIK_LOG_FORMAT=json``) writes one JSON object per line:
``time``, ``level``, ``logger``, ``message``, plus the record's structured fields (a run's
ids, durations and tokens; an access line's method, path, status...) as top-level keys,
and ``exception`` with the traceback when there is one. The text format keeps the fields
in the message itself, as ``key=value`` pairs.

Structured fields travel in ``extra={FIELDS: {...}}``, so a formatter that does not know
them still prints the message.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

__all__ = [
    "FIELDS",
    "QUIET_BELOW_DEBUG",
    "TEXT_FORMAT",
    "JsonFormatter",
    "configure_logging",
    "formatter_for",
    "gunicorn_logconfig",
]

FIELDS = "agentik_fields"
"""The ``extra`` key whose dict holds a record's structured fields."""

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "pid": record.process,
        }
        fields = getattr(record, FIELDS, None)
        if isinstance(fields, dict):
            for key, value in fields.items():
                line.setdefault(key, value)
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exception"] = record.exc_text
        return json.dumps(line, default=str, ensure_ascii=False)


def formatter_for(log_format: str) -> logging.Formatter:
    return JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT)


QUIET_BELOW_DEBUG = ("httpx",)
"""Loggers of libraries whose INFO lines are one per request (httpx's ``HTTP Request: POST
... "HTTP/1.1 200 OK"`` for every call to an LLM, an A2A agent, a webhook): WARNING and
above only, unless the log level is DEBUG."""


def configure_logging(level: str, log_format: str = "text") -> None:
    """Send every record at ``level`` and above to stderr in ``log_format``; like
    ``logging.basicConfig``, a no-op where the root logger has handlers already. The
    libraries of :data:`QUIET_BELOW_DEBUG` say only their warnings unless ``level`` is
    DEBUG."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter_for(log_format))
    logging.basicConfig(level=level, handlers=[handler])
    debug = logging.getLevelName(level) == logging.DEBUG
    for name in QUIET_BELOW_DEBUG:
        logging.getLogger(name).setLevel(logging.NOTSET if debug else logging.WARNING)


def gunicorn_logconfig(level: str, log_format: str) -> dict[str, Any]:
    """gunicorn's ``logconfig_dict``: its own lines and the app's, to stderr, in one format."""
    formatter: dict[str, Any]
    if log_format == "json":
        formatter = {"()": "agentik.logs.JsonFormatter"}
    else:
        formatter = {"format": TEXT_FORMAT, "class": "logging.Formatter"}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "root": {"level": level, "handlers": ["stderr"]},
        "loggers": {
            # Its own handler would print each line twice (its own and the root's).
            "gunicorn.error": {"level": level, "handlers": [], "propagate": True},
            # The facade writes its own access log (web_facade.observe): gunicorn's would
            # repeat each request, with its query string.
            "gunicorn.access": {"level": "CRITICAL", "handlers": [], "propagate": False},
        },
        "handlers": {
            "stderr": {
                "class": "logging.StreamHandler",
                "formatter": "agentik",
                "stream": "ext://sys.stderr",
            }
        },
        "formatters": {"agentik": formatter},
    }
