"""``parley serve``'s one switch for traces: --otlp-endpoint, else OTEL_EXPORTER_OTLP_ENDPOINT."""

from __future__ import annotations

import pytest

from deploy.cli import build_parser
from deploy.serve_cli import _tracing
from pipeline.errors import ConfigError


def _args(*argv: str):
    return build_parser().parse_args(["serve", *argv])


def test_off_unless_asked(monkeypatch):
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    assert _tracing(_args(), None) is None


@pytest.mark.parametrize("how", ["flag", "env"])
def test_the_flag_or_the_standard_variable_turns_it_on(monkeypatch, how):
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    if how == "env":
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    tracing = _tracing(_args(*(["--otlp-endpoint", "http://127.0.0.1:4318"] if how == "flag" else [])), None)
    try:
        assert tracing is not None and tracing.enabled and tracing.agent_name == "echo"
    finally:
        tracing.shutdown()


def test_a_bad_endpoint_refuses_to_start(monkeypatch):
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    with pytest.raises(ConfigError, match="OTLP endpoint"):
        _tracing(_args("--otlp-endpoint", "collector:4318"), None)
