"""The SIGTERM handler that marks a worker as draining (``web_facade.gunicorn_conf.
post_worker_init``) must never wait for a lock: signals arrive in the main thread between
any two bytecodes, also while that thread is inside the flag's own ``set`` or ``clear``.
With a ``threading.Event`` a handler run there waited for the lock its own thread held, and
the web worker never exited after ``agentik serve`` was killed."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.web.e2e.conftest import ROOT

HAMMERED = textwrap.dedent(
    """
    import os, signal, sys, threading, time
    from web_facade import gunicorn_conf
    from web_facade.stream import DRAINING

    class Worker:
        pass

    handled = 0

    def exiting(signum, frame):  # gunicorn's own SIGTERM handler, called after drain
        global handled
        handled += 1

    signal.signal(signal.SIGTERM, exiting)
    gunicorn_conf.post_worker_init(Worker())  # drain, then exiting

    sys.setswitchinterval(1e-4)  # the sender gets the GIL back soon after each signal

    def hammer():
        for _ in range(2000):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0)  # let the main thread handle it before the next

    sender = threading.Thread(target=hammer)
    sender.start()
    while sender.is_alive():  # the main thread inside the flag's methods, all the time
        DRAINING.clear()
        DRAINING.set()
        DRAINING.is_set()
    sender.join()
    print("handled", handled)
    """
)


def test_sigterms_that_arrive_while_the_flag_is_being_set_or_cleared_never_hang() -> None:
    done = subprocess.run(
        [sys.executable, "-c", HAMMERED],
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    handled = int(done.stdout.split()[-1])
    assert handled > 500  # the signals were handled, through drain, while the flag was busy
