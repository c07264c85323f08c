"""parley's own streaming SSM voice (``ssm_engine.tts``) as a pipecat TTS service.

    tts = SSMTTSService()                          # models/tts, rate from the pipeline (8 kHz)
    tts = SSMTTSService(model_dir="models/tts", aggregation="phrase")

The model runs in ``pipeline.engines.ssm_voice.SSMVoiceEngine`` (one thread per process, every
call's utterances batched together, each kept 100 ms ahead; read its docstring); this service
turns a call's text into its utterances.

It is ``VoiceTTSService`` (read its docstring: text aggregation, word timestamps as written,
barge-in, errors) on the SSM voice, with one thing of its own: a reply's first phrase is held
back until ``start_buffer_s`` of it is made.

Why the start buffer (``START_BUFFER_S``, 200 ms): when a reply starts, the far end holds only
what has been sent and the voice has nothing made ahead; with many calls replying at once the
voice makes audio barely faster than real time, and the far end ran dry within the first half
second of replies (a probe in the pacer placed nearly every remaining underrun 120-600 ms into a
reply, several calls at the same instant). bench_transports, 16 mixed calls on 2 cores, three
interleaved rounds: agent frames underrun 3, 37 and 2 without the cushion, none in any round with
200 ms. It costs one call alone the time to make the extra audio: first byte p50 +6 ms on
Twilio, +11 ms on WebRTC, +27 ms on SIP (two rounds each). Holding back only while the voice ran
slow did not save that at one call and let 10 frames underrun in a mixed run, so the rule stays
this simple; ``start_buffer_s=0`` sends the first chunk at once.
"""

from __future__ import annotations

import functools
from pathlib import Path

from pipecat.services.settings import TTSSettings
from pipecat.transcriptions.language import Language

from pipeline.engines.remote_voice import RemoteVoiceEngine
from pipeline.engines.ssm_voice import DEFAULT_MODEL_DIR, SSMVoiceEngine, check_voice_dir
from pipeline.engines.written import WrittenWords
from pipeline.services.voice_tts import Aggregation, VoiceTTSService

__all__ = ["SSMTTSService", "WrittenWords", "START_BUFFER_S"]

START_BUFFER_S = 0.2  # a reply's first audio leaves once this much of it is made


class SSMTTSService(VoiceTTSService):
    """parley's SSM voice for pipecat (see the module docstring).

    model_dir: the voice folder (config.json + model.safetensors); ignored when ``engine`` is
        given. Checked here, loaded (once per process) at ``start``.
    engine: an ``SSMVoiceEngine``, a ``VoiceProcess`` or the model tier's
        ``RemoteVoiceEngine``; default ``SSMVoiceEngine.shared(model_dir)``.
    sample_rate: output rate; None takes the pipeline's ``audio_out_sample_rate``.
    aggregation: "sentence", "phrase" (default) or "token", as in ``VoiceTTSService``.
    min_phrase_chars / first_phrase_words: the phrase aggregator's settings.
    seed: the vocoder's noise seed (the same text gives the same samples).
    start_buffer_s: how much of a reply's audio is made before any of it leaves (or the whole
        first phrase, if shorter); 0 sends the first chunk as it comes.
    """

    def __init__(
        self,
        *,
        model_dir: str | Path = DEFAULT_MODEL_DIR,
        engine: SSMVoiceEngine | RemoteVoiceEngine | None = None,
        sample_rate: int | None = None,
        aggregation: Aggregation = "phrase",
        min_phrase_chars: int = 12,
        first_phrase_words: int = 1,
        seed: int = 0,
        start_buffer_s: float = START_BUFFER_S,
        **kwargs,
    ) -> None:
        if engine is None:
            check_voice_dir(model_dir)
        super().__init__(
            voice=engine,
            load_voice=functools.partial(SSMVoiceEngine.shared, model_dir),
            settings=TTSSettings(model="parley-ssm-tts", voice=str(model_dir), language=Language.EN),
            sample_rate=sample_rate, aggregation=aggregation, min_phrase_chars=min_phrase_chars,
            first_phrase_words=first_phrase_words, seed=seed, start_buffer_s=start_buffer_s,
            **kwargs,
        )
