"""gunicorn settings for the web facade (``gunicorn -c python:web_facade.gunicorn_conf``).

Values come from agentik's settings (env, or the TOML file named by ``AGENTIK_CONFIG``):
``AGENTIK_HTTP_ADDR``, ``AGENTIK_WEB_WORKERS``, ``AGENTIK_WEB_THREADS``; the worker reads
its own timeouts (``AGENTIK_WEB_HEADER_TIMEOUT``, ``..._BODY_TIMEOUT``, ``..._QUEUE_TIMEOUT``).
``gthread`` workers (``web_facade.gunicorn_worker``: gthread reading request heads in its
event loop, with a reserved lane for /health and /metrics, 503 when no thread is free and
JSON refusals): each open SSE stream holds one thread, so a worker serves ``threads``
streams at once.
This file imports no gRPC and makes no channel: workers make theirs after the fork.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
import time
from collections import deque
from types import FrameType
from typing import Any

from agentik.collector import settle
from agentik.config import ConfigError, load_settings
from agentik.logs import gunicorn_logconfig
from agentik.netcheck import refuse_open_exposure
from agentik.parent_watch import stop_with_parent

stop_with_parent()  # when started by `agentik serve`, a test or a benchmark

try:
    _settings = load_settings(None, os.environ, mcp=False)  # [mcp] is the engine's alone
    refuse_open_exposure(_settings, _settings.web.http_addr, "web facade")
except ConfigError as _exc:
    print(f"agentik web: configuration error: {_exc}", file=sys.stderr)
    raise SystemExit(2) from None

wsgi_app = "web_facade:create_app()"
bind = [_settings.web.http_addr]
# gthread with an edge slow and idle clients cannot starve, and JSON refusals.
worker_class = "web_facade.gunicorn_worker.EdgeThreadWorker"
logger_class = "web_facade.gunicorn_worker.QuietAccessLogger"
workers = _settings.web.workers
threads = _settings.web.threads
# gthread workers report to the master from their main loop, whatever their threads do, so
# this does not limit how long a stream may stay open; it only catches a hung worker.
timeout = 30
# On SIGTERM or reload, open streams end at the next frame boundary (see post_worker_init)
# and clients resume with Last-Event-ID; this is how long the rest may take.
graceful_timeout = 10
keepalive = 5
loglevel = _settings.log.level.lower()
errorlog = "-"
# gunicorn's lines and the app's (the access log is the app's: web_facade.observe) go to
# stderr in the configured format, text or JSON lines.
logconfig_dict = gunicorn_logconfig(_settings.log.level, _settings.log.format)


def _new_metrics_dir() -> str:
    """A private, new (so empty) directory for the workers' metric files, named after this
    master; the directories of masters that died without cleaning up are removed."""
    prefix = "agentik-web-metrics-"
    root = tempfile.gettempdir()
    for name in os.listdir(root):
        pid = name[len(prefix) :].split("-", 1)[0]
        if name.startswith(prefix) and pid.isdigit() and not _alive(int(pid)):
            path = os.path.join(root, name)
            if os.path.isdir(path) and os.stat(path).st_uid == os.getuid():
                shutil.rmtree(path, ignore_errors=True)
    return tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# Prometheus multi-process mode: each worker writes its metrics to files in this directory
# and GET /metrics sums them; removed when the master exits. Set before any worker
# imports prometheus_client, which reads it at import. Under `agentik serve` there is no
# master: the serve process made the directory and removes it (web_facade/serve_web.py).
_metrics_dir = os.environ.pop("AGENTIK_SERVE_METRICS_DIR", "") or _new_metrics_dir()
os.environ["PROMETHEUS_MULTIPROC_DIR"] = _metrics_dir
proc_name = "agentik-web"
# No control socket (gunicorn >= 25.1 makes one by default, at one path per user:
# $XDG_RUNTIME_DIR/gunicorn.ctl or ~/.gunicorn/gunicorn.ctl, so a second `agentik web` on
# the host would take it from the first). agentik does not use `gunicornc`: the facade is
# run and stopped with signals (SIGTERM, SIGHUP), and its worker count is a setting; a
# socket that can resize or stop the server is one more thing to secure for no use.
control_socket_disable = True


def child_exit(server: Any, worker: Any) -> None:
    """A dead worker's live gauges (open streams) stop counting, and its slot of the
    connection counts (``web_facade.conn_balance``) is freed."""
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)  # type: ignore[no-untyped-call]
    slots = getattr(server, _BALANCE, None)
    if slots is not None:
        slots.release(worker)


_restarts: deque[float] = deque()
_BALANCE = "agentik_balance"
"""The master's attribute holding the workers' connection counts (kept on the arbiter,
not in this module, which a reload (SIGHUP) executes again)."""


def pre_fork(server: Any, worker: Any) -> None:
    """Stop the master on a crash loop (:func:`_halt_on_crash_loop`), then give the new
    worker its slot of the workers' shared connection counts (``web_facade.conn_balance``:
    the worker pauses accepting while it holds more than its share). Made here, in the
    master, on the first fork, so the workers inherit it: twice ``workers`` slots, for a
    reload starts the new workers beside the old; none with a single worker."""
    _halt_on_crash_loop(server, worker)
    slots = getattr(server, _BALANCE, None)
    if slots is None:
        if server.cfg.workers < 2:
            return
        from web_facade.conn_balance import Slots

        slots = Slots.anonymous(2 * server.cfg.workers)
        setattr(server, _BALANCE, slots)
    slot = slots.claim(worker, server.WORKERS.values())
    if slot >= 0:
        worker.balance, worker.balance_slot = slots, slot


def _halt_on_crash_loop(server: Any, worker: Any) -> None:
    """Stop the master (exit 1) rather than restart workers in a crash loop: gunicorn
    replaces a worker that dies after booting as often as it dies. A spawn past the first
    ``workers`` that fills a gap (not a reload's, which starts the new workers beside the
    old) replaces a dead worker; ``[web] worker_restarts_per_minute`` of them are allowed in
    any 60 s, as under ``agentik serve`` (``web_facade.serve_web``)."""
    if worker.age <= server.cfg.workers or len(server.WORKERS) >= server.num_workers:
        return
    from gunicorn.errors import HaltServer  # type: ignore[import-untyped]

    from web_facade.serve_web import too_many_restarts

    limit = _settings.web.worker_restarts_per_minute
    if why := too_many_restarts(_restarts, limit, time.monotonic()):
        raise HaltServer(why, 1)


def on_exit(server: Any) -> None:
    shutil.rmtree(_metrics_dir, ignore_errors=True)


def when_ready(server: Any) -> None:
    """Say once (not per worker) where the workers' traces go, when they are on."""
    from agentik import tracing

    where = tracing.describe(os.environ)
    if where is not None:
        server.log.info("%s", where)


def post_fork(server: Any, worker: Any) -> None:
    """Start tracing in the new worker (the exporter's thread does not survive a fork)."""
    from agentik import tracing

    tracing.setup("agentik-web")


def worker_exit(server: Any, worker: Any) -> None:
    """Export the worker's spans still waiting before it exits."""
    from agentik import tracing

    tracing.shutdown()


def post_worker_init(worker: Any) -> None:
    """On SIGTERM, also tell open SSE streams to end cleanly (``web_facade.stream.DRAINING``);
    the app is loaded: what it made is frozen for the collector (:mod:`agentik.collector`)."""
    from web_facade.stream import DRAINING

    settle(_settings.web.gc_threshold)

    previous = signal.getsignal(signal.SIGTERM)

    def drain(signum: int, frame: FrameType | None) -> None:
        DRAINING.set()
        if callable(previous):
            previous(signum, frame)

    signal.signal(signal.SIGTERM, drain)
