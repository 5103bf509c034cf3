import threading
from collections.abc import Iterator

import pytest

from tests.engine.conftest import harness
from tests.engine.harness import WAIT
from tests.tools import sample_tools

__all__ = ["harness", "fresh_events"]


@pytest.fixture(autouse=True)
def fresh_events() -> Iterator[None]:
    """The sample tools' events cleared; after the test, every thread still blocked in
    ``wait_sync`` released and joined, so no test leaves one running."""
    for event in (sample_tools.started, sample_tools.release, sample_tools.cancelled):
        event.clear()
    yield
    sample_tools.release.set()
    for thread in threading.enumerate():
        if thread.name.startswith("python-tool-"):
            thread.join(WAIT)
