"""``agentik.collector.settle``: what start-up made is frozen, the youngest generation is
collected less often, and 0 leaves Python's collector alone."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentik.collector import release, settle

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _collector_as_it_was() -> Iterator[None]:
    threshold = gc.get_threshold()
    frozen = gc.get_freeze_count()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)
    assert frozen == 0 or gc.get_freeze_count() == 0  # nothing of ours stays frozen


class _Cycle:
    def __init__(self) -> None:
        self.me = self


def test_settle_freezes_what_exists_and_collects_the_young_less_often() -> None:
    gc.unfreeze()
    kept = [_Cycle() for _ in range(10)]
    _, middle, oldest = gc.get_threshold()
    settle(10_000)
    assert gc.get_threshold() == (10_000, middle, oldest)
    assert gc.get_freeze_count() > len(kept)
    tracked = {id(o) for o in gc.get_objects()}
    assert not any(id(o) in tracked for o in kept)  # frozen: no collection scans them


def test_garbage_from_before_is_freed_not_frozen() -> None:
    gc.unfreeze()
    gc.disable()  # so that only settle collects it
    try:
        freed: list[str] = []

        class Noted(_Cycle):
            def __del__(self) -> None:
                freed.append("cycle")

        Noted()  # unreachable at once, a cycle only the collector frees
        settle(10_000)
        assert freed == ["cycle"]
    finally:
        gc.enable()


def test_cycles_made_after_are_still_collected() -> None:
    gc.unfreeze()
    settle(10_000)
    freed: list[str] = []

    class Noted(_Cycle):
        def __del__(self) -> None:
            freed.append("cycle")

    Noted()
    gc.collect()
    assert freed == ["cycle"]


def test_zero_leaves_the_collector_as_it_is() -> None:
    gc.unfreeze()
    before = gc.get_threshold()
    settle(0)
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


_ENGINE = """
import asyncio, gc, json
from agentik.config import load_settings
from engine_service.build import build_engine
from engine_service.server import run_engine

class Companion:
    seen = None
    def start(self): pass
    def check(self):
        Companion.seen = [gc.get_threshold()[0], gc.get_freeze_count() > 10_000]
        return False
    def stop(self): return True
    def hurry(self): pass
    def close(self): pass

env = {"AGENTIK_STORE": "memory://", "AGENTIK_GRPC_ADDR": "127.0.0.1:0",
       "AGENTIK_GC_THRESHOLD": "12345"}
settings = load_settings(None, env)
asyncio.run(run_engine(settings, build_engine(settings), companion=Companion()))
print(json.dumps(Companion.seen))
"""

_WEB_WORKER = """
import gc, json
from web_facade import gunicorn_conf

class Worker:
    pass

gunicorn_conf.post_worker_init(Worker())
print(json.dumps([gc.get_threshold()[0], gc.get_freeze_count() > 10_000]))
"""


@pytest.mark.parametrize(
    ("script", "variable", "value"),
    [(_ENGINE, "AGENTIK_GC_THRESHOLD", 12345), (_WEB_WORKER, "AGENTIK_WEB_GC_THRESHOLD", 23456)],
    ids=["engine", "web worker"],
)
def test_a_started_engine_and_web_worker_settle_their_collector(
    script: str, variable: str, value: int
) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), variable: str(value)}
    env.pop("AGENTIK_CONFIG", None)
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, cwd=ROOT, capture_output=True, text=True,
        timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [value, True]


def _refuse(body: str) -> None:
    raise ValueError("refused")


def _handled(body: str) -> BaseException:
    """An error raised while handling another, kept (as gRPC keeps an abort's)."""
    try:
        try:
            _refuse(body)
        except ValueError as first:
            raise KeyError("mapped") from first
    except KeyError as second:
        return second
    raise AssertionError("not raised")


def test_release_lets_an_error_and_its_causes_go_of_their_frames() -> None:
    body = "z" * 1000
    error = _handled(body)
    cause = error.__cause__
    assert cause is not None and cause.__traceback__ is not None
    inner = cause.__traceback__.tb_next
    assert inner is not None
    frame = inner.tb_frame  # _refuse's, holding the body
    assert frame.f_locals["body"] is body

    release(error)

    assert error.__traceback__ is None and error.__cause__ is None and error.__context__ is None
    assert cause.__traceback__ is None
    assert "body" not in frame.f_locals  # the ended frame let go of its locals
