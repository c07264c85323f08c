"""pocketsphinx as a streaming pipecat STT service, finalized by the VAD's end of speech.

    stt = SphinxSTTService()                     # rate from the pipeline (8 kHz for phone calls)
    Pipeline([transport.input(), VADProcessor(vad_analyzer=...), stt, user_aggregator, ...])

How it follows the user's speech:

* Audio is decoded as it arrives, on one worker thread that owns the ``SphinxEngine``; the event
  loop only queues it, so audio passes through this service without waiting on the decoder.
* The engine is taken from a pool (``pipeline.engines.sphinx.default_pool()`` unless one is
  given: in-process, or worker processes under ``parley serve``) in ``start()`` and handed back
  on the same worker thread in ``stop()``/``cancel()``, after the decode work already queued
  there, so it is never in two calls at once. Building an engine takes ~0.4 s; prewarm the pool
  at server start so a new call never builds one.
* If the engine's worker process dies, the error is pushed as an ``ErrorFrame``, the utterance
  in progress is lost, and the call goes on with a fresh engine (the pool starts a new worker).
* Between utterances the last ``preroll_s`` of audio is kept, not decoded. pipecat's VAD reports
  a start ``start_secs`` after speech began, so on ``VADUserStartedSpeakingFrame`` the utterance
  starts with that pre-roll, and ``InterimTranscriptionFrame``s follow as partials change.
* ``VADUserStoppedSpeakingFrame`` is pipecat 1.14's "the user stopped speaking" signal to STT
  services (Deepgram finalizes on it too). It reaches this service from an upstream
  ``VADProcessor`` (downstream copy) or from the user aggregator's own VAD (the upstream copy
  of its broadcast). The utterance is ended at once and the final ``TranscriptionFrame`` is
  pushed with ``finalized=True``, which lets the turn-stop strategies end the turn without
  waiting out their STT timeout. The time from receiving that frame to pushing the transcript
  is kept in ``final_latencies_s``.

Without VAD frames in the pipeline nothing is ever transcribed.
"""

from __future__ import annotations

from pipecat.services.settings import STTSettings
from pipecat.transcriptions.language import Language

from pipeline.engines.sphinx import EnginePool, SphinxBackend, default_pool
from pipeline.services.queued_stt import QueuedSTTService

__all__ = ["SphinxSTTService"]


class SphinxSTTService(QueuedSTTService):
    """Streaming pocketsphinx recognizer (en-us) for pipecat: ``QueuedSTTService`` on a
    ``SphinxBackend``.

    sample_rate: input rate; None takes the pipeline's ``audio_in_sample_rate``.
    preroll_s: audio kept before the VAD's start signal, fed at the start of each utterance.
    partial_every_ms: audio between two partial hypotheses.
    ttfs_p99_latency: end of speech to final transcript, p99, announced to turn strategies.
    pool: where engines come from and go back to (``SphinxPool`` or ``SphinxProcessPool``);
        None means ``default_pool()``.
    """

    def __init__(self, *, sample_rate: int | None = None, preroll_s: float = 0.5,
                 partial_every_ms: int = 100, ttfs_p99_latency: float = 0.15,
                 pool: EnginePool | None = None, **kwargs) -> None:
        super().__init__(
            backend=SphinxBackend(pool if pool is not None else default_pool(), partial_every_ms),
            sample_rate=sample_rate, ttfs_p99_latency=ttfs_p99_latency,
            settings=STTSettings(model="pocketsphinx-en-us", language=Language.EN),
            preroll_s=preroll_s, **kwargs)
