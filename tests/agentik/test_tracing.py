"""Which ``OTEL_*`` settings turn traces on (``agentik.tracing``), as the
OpenTelemetry specification reads them; the end-to-end trace is in tests/web/e2e."""

from __future__ import annotations

import logging

import pytest

from agentik.tracing import describe, exporters


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, []),
        ({"OTEL_SERVICE_NAME": "svc"}, []),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, ["otlp"]),
        ({"OTEL_TRACES_EXPORTER": " Console , otlp,console"}, ["console", "otlp"]),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, ["otlp"]),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, ["otlp"]),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c"}, []),
        ({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SDK_DISABLED": "TRUE"}, []),
        ({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SDK_DISABLED": "false"}, ["otlp"]),
    ],
)
def test_traces_are_on_only_when_an_exporter_is_configured(
    environ: dict[str, str], expected: list[str]
) -> None:
    assert exporters(environ) == expected


def test_an_exporter_agentik_lacks_is_logged_and_ignored(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        assert exporters({"OTEL_TRACES_EXPORTER": "zipkin,console"}) == ["console"]
    assert "'zipkin' is not an exporter agentik has (otlp, console)" in caplog.text


def test_the_start_up_line_names_where_spans_go() -> None:
    assert describe({}) is None
    assert describe({"OTEL_TRACES_EXPORTER": "otlp"}) == (
        "traces: OTLP to http://localhost:4318/v1/traces"
    )
    assert describe({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318/"}) == (
        "traces: OTLP to http://c:4318/v1/traces"
    )
    both = {
        "OTEL_TRACES_EXPORTER": "console,otlp",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://c/traces",
    }
    assert describe(both) == "traces: the console and OTLP to https://c/traces"
