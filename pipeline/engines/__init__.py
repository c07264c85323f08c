"""Offline speech engines, free of pipecat: espeak-ng, pocketsphinx (and its decoder pool) and
Whisper are synchronous (call them from a worker thread); ``ssm_voice`` runs its own thread."""

from pipeline.engines.espeak import EspeakEngine, SynthChunk
from pipeline.engines.sphinx import SPHINX_POOL, SphinxEngine, SphinxPool

__all__ = ["EspeakEngine", "SphinxEngine", "SphinxPool", "SPHINX_POOL", "SynthChunk"]
