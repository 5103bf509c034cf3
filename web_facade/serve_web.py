"""The web facade's workers under ``agentik serve``, without gunicorn's master process.

``agentik serve`` runs the engine in its own process and starts the facade's workers beside
it (docs/performance.md "Idle memory": a gunicorn master and a supervisor cost 40 MiB of an
idle tree for nothing a local start needs). The serve process binds the web address before
the engine starts, then :class:`WebWorkers` spawns each worker as a fresh interpreter
(``python -m web_facade.serve_web``; fork+exec, never a bare fork of a process that runs
gRPC threads) that inherits the listening socket. The worker is gunicorn's own, configured
by ``web_facade.gunicorn_conf`` like ``agentik web``'s: the same worker class, threads,
timeouts, hooks and log format.

What gunicorn's master did, the serve process does: it restarts a worker that dies (one that
fails to boot stops the whole ``serve``, exit 1; so does a death past ``[web]
worker_restarts_per_minute`` restarts in 60 s, a crash loop, which ``agentik web`` stops with
``web_facade.gunicorn_conf.pre_fork``), kills one that misses its heartbeat for ``timeout``
seconds (SIGABRT, then SIGKILL), stops them with SIGTERM (graceful: open streams
end at the next frame boundary) and SIGINT on a second signal, keeps their Prometheus
multi-process files in one directory and clears a dead worker's live gauges. ``agentik web``
keeps gunicorn's master. With two workers or more it also makes the workers' shared
connection counts (``web_facade.conn_balance``: a memfd, one slot per worker, passed like
the socket) and frees a dead worker's slot.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agentik.parent_watch import env_for_child
from web_facade.conn_balance import Slots

__all__ = [
    "BALANCE_ENV",
    "BOOT_FAILED",
    "HEARTBEAT_ENV",
    "METRICS_DIR_ENV",
    "SOCKET_ENV",
    "WebWorkers",
    "bind",
    "main",
]

SOCKET_ENV = "AGENTIK_SERVE_WEB_SOCKET"
"""The inherited listening socket's file descriptor (a worker's environment)."""
HEARTBEAT_ENV = "AGENTIK_SERVE_WEB_HEARTBEAT"
"""The inherited heartbeat file's descriptor: the worker touches it, the parent reads it."""
AGE_ENV = "AGENTIK_SERVE_WEB_AGE"
BALANCE_ENV = "AGENTIK_SERVE_WEB_BALANCE"
"""``FD:SLOT``: the inherited descriptor of the workers' connection counts and the
worker's slot in them (``web_facade.conn_balance``); unset with a single worker."""
METRICS_DIR_ENV = "AGENTIK_SERVE_METRICS_DIR"
"""The workers' shared Prometheus directory, made by the serve process
(``web_facade.gunicorn_conf`` takes it instead of making one of its own)."""
BOOT_FAILED = (3, 4)
"""gunicorn's exit codes of a worker that could not boot or load the app: not restarted."""
BACKLOG = 2048
"""Pending connections the listening socket holds (gunicorn's default)."""
TICK = 0.5
"""Seconds between the parent's looks at its workers."""
RESTART_WINDOW = 60.0
"""Seconds over which ``[web] worker_restarts_per_minute`` counts the restarts."""
RESTART_LIMIT = (
    "[web] worker_restarts_per_minute = {limit} (AGENTIK_WEB_WORKER_RESTARTS_PER_MINUTE)"
)


def too_many_restarts(restarts: deque[float], limit: int, now: float) -> str:
    """Why a worker that died at ``now`` may not be restarted ("" if it may), ``restarts``
    being the times of the restarts so far, which this trims to the last 60 s and, when the
    answer is "", extends with ``now`` (``agentik serve``'s and gunicorn's master alike)."""
    while restarts and restarts[0] <= now - RESTART_WINDOW:
        restarts.popleft()
    if len(restarts) < limit:
        restarts.append(now)
        return ""
    return (
        f"web workers died {limit + 1} times within {RESTART_WINDOW:g}s, more than "
        f"{RESTART_LIMIT.format(limit=limit)} allows: a crash loop (see the worker's "
        "error above); not restarting them"
    )


def bind(addr: str) -> socket.socket:
    """A listening socket on ``HOST:PORT`` (port 0: a free one), inheritable."""
    host, _, port = addr.rpartition(":")
    host = host.strip("[]")
    family, kind, proto, _, where = socket.getaddrinfo(
        host or None, int(port), type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(where)
        sock.listen(BACKLOG)
    except BaseException:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


@dataclass
class _Worker:
    age: int
    popen: subprocess.Popen[bytes]
    heartbeat: int
    aborted: bool = False


@dataclass
class WebWorkers:
    """The facade's ``count`` workers on ``sock``, run from the serve process's main thread
    (a child asks for SIGTERM when the *thread* that started it ends)."""

    sock: socket.socket
    count: int
    env: Mapping[str, str]
    max_restarts: int = 10
    """Workers restarted in any 60 s; the next death stops the web (``[web]
    worker_restarts_per_minute``)."""
    timeout: float = 30.0
    """A worker that has not touched its heartbeat for this long is killed (gunicorn's
    ``timeout``, ``web_facade.gunicorn_conf``)."""
    stop_timeout: float = 30.0
    """Seconds a worker gets to stop after SIGTERM before it is killed."""
    started: str = ""
    """Said once the workers are started (after gunicorn's ``Listening at:`` line)."""
    stopping: str = ""
    """Said when told to stop."""
    say: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True)
    python: str = sys.executable
    workers: list[_Worker] = field(default_factory=list)
    metrics_dir: str = ""
    failed: str = ""
    """Why the web stopped for good ("" while it runs)."""
    balance: Slots | None = None
    """The workers' connection counts, one slot each (two workers or more)."""
    _age: int = 0
    _restarts: deque[float] = field(default_factory=deque)

    def start(self) -> None:
        self.metrics_dir = tempfile.mkdtemp(prefix=f"agentik-web-metrics-{os.getpid()}-")
        if self.count > 1:
            self.balance = Slots.memfd(self.count)
        for _ in range(self.count):
            self._spawn()
        # gunicorn's words, which scripts (and the tests) wait for.
        self.say(f"Listening at: {url_of(self.sock)} ({os.getpid()})")
        if self.started:
            self.say(self.started)

    def _spawn(self) -> None:
        self._age += 1
        # Its first touch puts the monotonic clock in the file's mtime: until then the
        # mtime is the wall clock, far ahead, so a booting worker is not timed out
        # (gunicorn's ``WorkerTmp`` alike).
        fd, path = tempfile.mkstemp(prefix="agentik-web-heartbeat-")
        os.unlink(path)
        env = {
            **env_for_child(self.env),
            SOCKET_ENV: str(self.sock.fileno()),
            HEARTBEAT_ENV: str(fd),
            AGE_ENV: str(self._age),
            METRICS_DIR_ENV: self.metrics_dir,
        }
        pass_fds = [self.sock.fileno(), fd]
        if self.balance is not None:
            # A slot is the age of the worker that owns it; a dead worker's is freed.
            slot = self.balance.claim(self._age, [worker.age for worker in self.workers])
            if slot >= 0:
                env[BALANCE_ENV] = f"{self.balance.fd}:{slot}"
                pass_fds.append(self.balance.fd)
        try:
            popen = subprocess.Popen(
                [self.python, "-m", "web_facade.serve_web"],
                env=env,
                pass_fds=pass_fds,
                start_new_session=True,  # a Ctrl-C reaches it once, through us
            )
        except BaseException:
            os.close(fd)
            raise
        self.workers.append(_Worker(self._age, popen, fd))

    def check(self) -> bool:
        """Restart the workers that died, kill those that hang; False once a worker failed
        to boot, or died once too often (``failed`` says so): the web cannot run."""
        for worker in list(self.workers):
            code = worker.popen.poll()
            if code is None:
                self._watch_heartbeat(worker)
                continue
            self._forget(worker)
            if code in BOOT_FAILED:
                self.failed = f"a web worker failed to start (exit code {code})"
                return False
            how = f"signal {-code}" if code < 0 else f"exit code {code}"
            if why := too_many_restarts(self._restarts, self.max_restarts, time.monotonic()):
                self.say(f"agentik: web worker {worker.popen.pid} died ({how})")
                self.failed = why
                return False
            self.say(f"agentik: web worker {worker.popen.pid} died ({how}); starting another")
            self._spawn()
        return True

    def _watch_heartbeat(self, worker: _Worker) -> None:
        silent = time.monotonic() - os.fstat(worker.heartbeat).st_mtime
        if silent <= self.timeout:
            return
        self.say(f"agentik: web worker {worker.popen.pid} timed out ({silent:.0f}s silent)")
        with _gone():
            worker.popen.send_signal(signal.SIGKILL if worker.aborted else signal.SIGABRT)
        worker.aborted = True

    def _forget(self, worker: _Worker) -> None:
        self.workers.remove(worker)
        os.close(worker.heartbeat)
        if self.balance is not None:
            self.balance.release(worker.age)
        from prometheus_client import multiprocess

        # The dead worker's live gauges (open streams) stop counting (gunicorn_conf's
        # child_exit, under gunicorn's master).
        multiprocess.mark_process_dead(worker.popen.pid, self.metrics_dir)  # type: ignore[no-untyped-call]

    def signal_all(self, sig: int) -> None:
        for worker in self.workers:
            if worker.popen.poll() is None:
                with _gone():
                    worker.popen.send_signal(sig)

    def hurry(self) -> None:
        """gunicorn's quick shutdown (SIGINT) for every worker still running."""
        self.signal_all(signal.SIGINT)

    def stop(self) -> bool:
        """SIGTERM every worker, SIGKILL those still running after ``stop_timeout``
        seconds; True when all of them ended cleanly. Blocks: run it in a thread."""
        if self.failed:
            self.say(f"agentik: stopping: {self.failed}")
        elif self.stopping:
            self.say(self.stopping)
        self.signal_all(signal.SIGTERM)
        deadline = time.monotonic() + self.stop_timeout
        clean = True
        for worker in self.workers:
            try:
                code = worker.popen.wait(max(deadline - time.monotonic(), 0.0))
            except subprocess.TimeoutExpired:
                worker.popen.kill()
                code = worker.popen.wait()
            clean = clean and code in (0, -signal.SIGTERM)
        return clean

    def close(self) -> None:
        self.signal_all(signal.SIGTERM)  # none, after stop(); any, after a failure
        for worker in self.workers:
            os.close(worker.heartbeat)
        self.workers.clear()
        self.sock.close()
        if self.balance is not None:
            self.balance.close()
            self.balance = None
        if self.metrics_dir:
            shutil.rmtree(self.metrics_dir, ignore_errors=True)


class _gone:
    """Ignore a worker that exited between the look and the signal."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> bool:
        return isinstance(exc[1], ProcessLookupError)


class _Heartbeat:
    """gunicorn's ``WorkerTmp`` on the descriptor the parent holds too."""

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def notify(self) -> None:
        now = time.monotonic()
        os.utime(self._fd, (now, now))

    def last_update(self) -> float:
        return os.fstat(self._fd).st_mtime

    def fileno(self) -> int:
        return self._fd

    def close(self) -> None:
        os.close(self._fd)


def main() -> int:
    """One worker, as gunicorn's master would have forked it (``Arbiter.spawn_worker``)."""
    try:
        fd = int(os.environ.pop(SOCKET_ENV))
        heartbeat = int(os.environ.pop(HEARTBEAT_ENV))
        age = int(os.environ.pop(AGE_ENV, "1"))
    except (KeyError, ValueError):
        print("web_facade.serve_web: started by `agentik serve`, not by hand", file=sys.stderr)
        return 2
    # gunicorn reads its settings from the command line: our config module's, as `agentik web`.
    sys.argv = ["agentik-web", "--config", "python:web_facade.gunicorn_conf"]
    from gunicorn.app.wsgiapp import WSGIApplication  # type: ignore[import-untyped]
    from gunicorn.errors import AppImportError  # type: ignore[import-untyped]
    from gunicorn.sock import create_sockets  # type: ignore[import-untyped]

    app = WSGIApplication(prog="agentik serve")
    cfg: Any = app.cfg
    log: Any = cfg.logger_class(cfg)
    sockets = create_sockets(cfg, log, fds=[fd])
    worker: Any = cfg.worker_class(age, os.getppid(), sockets, app, cfg.timeout / 2.0, cfg, log)
    worker.tmp.close()
    worker.tmp = _Heartbeat(heartbeat)
    worker.pid = os.getpid()
    if balance := os.environ.pop(BALANCE_ENV, ""):
        try:
            balance_fd, slot = (int(part) for part in balance.split(":"))
            slots = Slots.from_fd(balance_fd)
            if not 0 <= slot < len(slots):
                slots.close()
                raise ValueError(f"no slot {slot} of {len(slots)}")
            worker.balance, worker.balance_slot = slots, slot
        except (ValueError, OSError) as exc:  # then accept as a lone worker would
            log.warning("web worker: no connection balance (%s): %s", balance, exc)
    log.info("Booting worker with pid: %s", worker.pid)
    try:
        cfg.post_fork(None, worker)
        worker.init_process()
        return 0
    except AppImportError as exc:
        print(exc, file=sys.stderr, flush=True)
        return 4
    except Exception as exc:  # gunicorn's own handling: logged, and the exit code says
        log.exception("Exception in worker process")
        print(exc, file=sys.stderr, flush=True)
        return 1 if worker.booted else 3
    finally:
        log.info("Worker exiting (pid: %s)", worker.pid)
        cfg.worker_exit(None, worker)


if __name__ == "__main__":
    raise SystemExit(main())
