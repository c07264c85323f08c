"""parley's own streaming SSM recogniser as a pipecat STT service, finalized by the VAD.

    stt = SSMSTTService()                 # models/stt, rate from the pipeline (8 or 16 kHz)
    Pipeline([transport.input(), VADProcessor(vad_analyzer=...), stt, user_aggregator, ...])

Same contract as ``SphinxSTTService`` (read its docstring): between utterances the last
``preroll_s`` of audio is kept; ``VADUserStartedSpeakingFrame`` opens an utterance with that
pre-roll; ``InterimTranscriptionFrame``s follow as the greedy transcript grows;
``VADUserStoppedSpeakingFrame`` feeds ``flush_s`` (0.1 s) of silence (the CTC model emits its
last characters 100-200 ms late; the VAD has already waited ``stop_secs`` of silence, which the
model has seen, so a short flush suffices), pushes the final ``TranscriptionFrame`` with
``finalized=True`` and records the time from the stop signal in ``final_latencies_s``.

The engine (``pipeline.engines.ssm_recognizer.SSMSTTEngine``, in process, or the model tier's
``RemoteRecognizerEngine``) does the stepping and decoding; its docstring says how. The service
is ``QueuedSTTService`` on an ``SSMRecognizerBackend``: when the engine's worker process dies
mid-utterance, the backend waits for the replacement and replays the utterance into it: the
caller's words are heard whole, one line is logged, and no error reaches the pipeline.
"""

from __future__ import annotations

from pathlib import Path

from pipecat.services.settings import STTSettings
from pipecat.transcriptions.language import Language

from pipeline.engines.remote_recognizer import RemoteRecognizerEngine
from pipeline.engines.ssm_recognizer import (
    DEFAULT_COMPILE,
    DEFAULT_MODEL_DIR,
    Decoder,
    Runner,
    SSMRecognizerBackend,
    SSMSTTEngine,
)
from pipeline.services.queued_stt import QueuedSTTService

__all__ = ["SSMSTTService"]


class SSMSTTService(QueuedSTTService):
    """Streaming SSM recogniser for pipecat (see module docstring).

    engine: an SSMSTTEngine, or a RemoteRecognizerEngine (the model tier) (default:
        ``SSMSTTEngine.shared(model_dir, decoder, compile=compile, runner=runner)``, loaded at
        start); decoder: how finals are decoded, "beam" (lexicon + LM), "greedy" or a baseline
        ("char-beam", "phone-beam", see ``Decoder``; default ``DEFAULT_DECODER``); compile,
        runner: the shared engine's (``SSMSTTEngine``).
    sample_rate: input rate (8 or 16 kHz); None takes the pipeline's ``audio_in_sample_rate``.
    preroll_s: audio kept before the VAD's start signal, fed at the start of each utterance.
    """

    def __init__(self, *, engine: SSMSTTEngine | RemoteRecognizerEngine | None = None,
                 model_dir: str | Path = DEFAULT_MODEL_DIR, decoder: Decoder | None = None,
                 compile: bool = DEFAULT_COMPILE, runner: Runner = "thread",
                 sample_rate: int | None = None,
                 preroll_s: float = 0.5, ttfs_p99_latency: float = 0.1, **kwargs) -> None:
        super().__init__(backend=SSMRecognizerBackend(engine, model_dir=model_dir, decoder=decoder,
                                                      compile=compile, runner=runner),
                         sample_rate=sample_rate, ttfs_p99_latency=ttfs_p99_latency,
                         settings=STTSettings(model="parley-ssm-stt", language=Language.EN),
                         preroll_s=preroll_s, **kwargs)
