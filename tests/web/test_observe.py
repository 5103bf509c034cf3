"""``GET /metrics`` under gunicorn sums the workers' metric files, and a file a worker is
making or removing right then does not turn the scrape into a 500."""

from __future__ import annotations

from pathlib import Path

import pytest
from flask import Flask
from prometheus_client import multiprocess
from prometheus_client.mmap_dict import MmapedDict, mmap_key

from web_facade import observe


def _counter_file(directory: Path, pid: int, value: float) -> None:
    """The metric file a worker with ``pid`` writes for one counter (prometheus_client's
    multi-process format)."""
    values = MmapedDict(str(directory / f"counter_{pid}.db"))  # type: ignore[no-untyped-call]
    key = mmap_key("agentik_test_total", "agentik_test_total", [], [], "A test counter.")
    values.write_value(key, value, 0.0)  # type: ignore[no-untyped-call]
    values.close()  # type: ignore[no-untyped-call]


def test_the_workers_files_are_summed(tmp_path: Path) -> None:
    _counter_file(tmp_path, 101, 2.0)
    _counter_file(tmp_path, 102, 3.0)
    assert b"agentik_test_total 5.0" in observe._workers_metrics(str(tmp_path))


def test_a_file_a_new_worker_has_not_sized_yet_is_left_out(tmp_path: Path) -> None:
    _counter_file(tmp_path, 101, 2.0)
    (tmp_path / "counter_103.db").touch()  # created by a worker that has not written yet
    (tmp_path / "gauge_livesum_104.db").write_bytes(b"\x40\x00")  # cut short
    assert b"agentik_test_total 2.0" in observe._workers_metrics(str(tmp_path))


def test_files_that_stay_unreadable_answer_503_with_retry_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _counter_file(tmp_path, 101, 2.0)

    def unreadable(_files: list[str], accumulate: bool = True) -> None:
        raise FileNotFoundError("removed while read")

    monkeypatch.setattr(multiprocess.MultiProcessCollector, "merge", unreadable)
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    app = Flask(__name__)
    with app.app_context():
        response = observe.metrics_response()
    assert response.status_code == 503
    assert response.headers["Retry-After"] == "1"
    assert response.get_json() == {
        "error": {
            "code": "metrics_busy",
            "message": "the web workers' metrics could not be read now; try again",
        }
    }
