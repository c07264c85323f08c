"""pipecat services backed by the offline engines in ``pipeline.engines`` and ``ssm_engine``."""

from pipeline.services.espeak_tts import EspeakTTSService
from pipeline.services.phrases import PhraseTextAggregator
from pipeline.services.sphinx_stt import SphinxSTTService
from pipeline.services.ssm_stt import SSMSTTService

__all__ = ["EspeakTTSService", "PhraseTextAggregator", "SSMSTTService", "SphinxSTTService"]
