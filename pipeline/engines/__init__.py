"""Offline speech engines, synchronous and free of pipecat: call them from a worker thread."""

from pipeline.engines.espeak import EspeakEngine, SynthChunk
from pipeline.engines.sphinx import SphinxEngine

__all__ = ["EspeakEngine", "SphinxEngine", "SynthChunk"]
