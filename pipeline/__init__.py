"""parley's voice pipeline on pipecat: VAD, speech services, latency, ``build_pipeline``.

Public API::

    from pipeline import PipelineConfig, build_pipeline, LatencyObserver, TurnLatency

The names load on first use (PEP 562), so a process that needs only ``pipeline.engines`` (the
pocketsphinx worker processes) does not import pipecat.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pipeline.builder import CallPipeline, PipelineConfig, build_pipeline
    from pipeline.latency import LatencyObserver, TurnLatency

_EXPORTS = {
    "CallPipeline": "pipeline.builder",
    "PipelineConfig": "pipeline.builder",
    "build_pipeline": "pipeline.builder",
    "LatencyObserver": "pipeline.latency",
    "TurnLatency": "pipeline.latency",
}

__all__ = ["CallPipeline", "LatencyObserver", "PipelineConfig", "TurnLatency", "build_pipeline"]


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'pipeline' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
