"""pipecat services backed by the offline engines in ``pipeline.engines``."""

from pipeline.services.espeak_tts import EspeakTTSService, PhraseTextAggregator
from pipeline.services.sphinx_stt import SphinxSTTService

__all__ = ["EspeakTTSService", "PhraseTextAggregator", "SphinxSTTService"]
