"""parley's voice pipeline on pipecat: VAD, speech services, latency, ``build_pipeline``.

Public API::

    from pipeline import PipelineConfig, build_pipeline, LatencyObserver, TurnLatency
"""

from pipeline.builder import CallPipeline, PipelineConfig, build_pipeline
from pipeline.latency import LatencyObserver, TurnLatency

__all__ = ["CallPipeline", "LatencyObserver", "PipelineConfig", "TurnLatency", "build_pipeline"]
