"""Functions the Python-tool tests name in ``[[tools.python]]`` entries."""

from __future__ import annotations

import asyncio
import threading
from typing import Literal

from pydantic import BaseModel

from engine_service.core.tool import ToolError

NOT_A_FUNCTION = 42

started = threading.Event()
"""Set when ``wait_async``/``wait_sync`` begins, so tests wait for it, not for time."""
release = threading.Event()
"""``wait_sync`` returns once this is set (tests set it to end the thread)."""
cancelled = threading.Event()
"""Set when ``wait_async`` sees its cancellation."""


class Point(BaseModel):
    """A point on the plane."""

    x: float
    y: float


class Forecast(BaseModel):
    city: str
    celsius: float
    sky: Literal["sunny", "cloudy"]


def forecast(city: str, days: int = 1, unit: Literal["C", "F"] = "C") -> Forecast:
    """Tomorrow's weather in a city.

    Looks it up in a table that never changes.

    Args:
        city: The city's name, e.g. 'Paris'.
        days: How many days ahead
            (1 means tomorrow).
        unit: Celsius or Fahrenheit.
    """
    return Forecast(city=city, celsius=21.5 if unit == "C" else 70.7, sky="sunny")


def everything(
    text: str,
    count: int,
    ratio: float,
    flag: bool,
    mode: Literal["fast", "slow"],
    note: str | None = None,
    tags: list[str] | None = None,
    point: Point | None = None,
) -> dict[str, object]:
    """Echo every argument back, with their Python types."""
    return {
        "text": text,
        "count": count,
        "ratio": ratio,
        "flag": flag,
        "mode": mode,
        "note": note,
        "tags": tags,
        "point_type": type(point).__name__,
        "x_plus_y": None if point is None else point.x + point.y,
    }


async def shout(text: str) -> str:
    """Say it louder."""
    await asyncio.sleep(0)
    return text.upper() + "!"


def divide(a: float, b: float) -> float:
    """a divided by b."""
    return a / b


def nothing() -> None:
    """Return nothing."""


def unserializable() -> object:
    """Return something JSON cannot hold."""
    return object()


async def wait_async() -> str:
    """Wait until cancelled."""
    started.set()
    try:
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        cancelled.set()
        raise
    return "never"


async def slow_note(path: str, seconds: float) -> str:
    """Note "start" in the file at ``path``, wait ``seconds``, then note "end": a call a
    test can see running (from another process) and stop its engine in the middle of."""
    _note(path, "start")
    await asyncio.sleep(seconds)
    _note(path, "end")
    return f"noted after {seconds} s"


def _note(path: str, line: str) -> None:
    with open(path, "a", encoding="utf-8") as file:
        file.write(line + "\n")


def wait_sync() -> str:
    """Block a thread until released."""
    started.set()
    release.wait(10.0)
    return "released"


def untyped(x) -> str:  # type: ignore[no-untyped-def]
    """No annotation."""
    return str(x)


def variadic(*names: str) -> str:
    """Star arguments."""
    return ",".join(names)


def odd_type(lock: threading.Lock) -> str:
    """A type with no JSON schema."""
    return "?"


def calculate(expression: str) -> str:
    """Collides with the built-in tool of this name."""
    return expression


def which_thread() -> dict[str, object]:
    """Where this call runs."""
    thread = threading.current_thread()
    return {"main": thread is threading.main_thread(), "daemon": thread.daemon}


def reserved_names(json: str, model_config: str, _private: int = 0) -> list[object]:
    """Parameter names pydantic's BaseModel keeps for itself."""
    return [json, model_config, _private]


def refuse(reason: str) -> str:
    """Fail with a message meant for the LLM."""
    raise ToolError(reason)
