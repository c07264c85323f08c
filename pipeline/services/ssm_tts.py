"""parley's own streaming SSM voice (``ssm_engine.tts``) as a pipecat TTS service.

    tts = SSMTTSService()                          # models/tts, rate from the pipeline (8 kHz)
    tts = SSMTTSService(model_dir="models/tts", aggregation="phrase")

The model runs in ``pipeline.engines.ssm_voice.SSMVoiceEngine`` (one thread per process, every
call's utterances batched together, each kept 100 ms ahead; read its docstring); this service
turns a call's text into its utterances.

The service follows ``EspeakTTSService`` (read its docstring): the same text aggregation
(``aggregation="phrase"`` speaks each reply's first word as soon as it is complete, then
phrases), word timestamps through ``add_word_timestamps`` offset by the audio already spoken in
the audio context, and on ``InterruptionFrame`` the base class cancels the task running
``run_tts``: the generator's ``finally`` cancels the utterance, whose queued jobs are dropped and
whose stream is never stepped again. Word timestamps carry the words as written (``WrittenWords``:
"$20" is reported once, at the start of "twenty dollars"), so pipecat matches them to the LLM's
text and the conversation keeps what the LLM wrote, cut where the caller stopped hearing it.

Text with nothing to say (only punctuation, emoji) gives 20 ms of silence and a debug line.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import warnings
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Literal

from pipecat.frames.frames import ErrorFrame, Frame, StartFrame, TTSAudioRawFrame
from pipecat.services.settings import TTSSettings
from pipecat.transcriptions.language import Language

with warnings.catch_warnings():
    # pipecat 1.14's tts_service module subclasses its own deprecated AudioContextTTSService
    # while it is imported; the warning is about pipecat's code, not ours.
    warnings.filterwarnings(
        "ignore", message=".*AudioContextTTSService.*", category=DeprecationWarning
    )
    from pipecat.services.tts_service import TextAggregationMode, TTSService

from pipeline.engines.remote_voice import RemoteVoiceEngine, RemoteVoiceUtterance
from pipeline.engines.written import WrittenWords
from pipeline.engines.ssm_voice import DEFAULT_MODEL_DIR, VoiceUtterance, SSMVoiceEngine, check_voice_dir
from pipeline.services.espeak_tts import PhraseTextAggregator
from pipeline.errors import ConfigError, PipelineError
from ssm_engine import SSMEngineError

__all__ = ["SSMTTSService", "WrittenWords", "START_BUFFER_S"]

START_BUFFER_S = 0.2  # a reply's first audio leaves once this much of it is made (run_tts)

logger = logging.getLogger(__name__)

Aggregation = Literal["sentence", "phrase", "token"]


class SSMTTSService(TTSService):
    """parley's SSM voice for pipecat (see the module docstring).

    model_dir: the voice folder (config.json + model.safetensors); ignored when ``engine`` is
        given. Checked here, loaded (once per process) at ``start``.
    engine: an ``SSMVoiceEngine`` to use (tests); default ``SSMVoiceEngine.shared(model_dir)``.
    sample_rate: output rate; None takes the pipeline's ``audio_out_sample_rate``.
    aggregation: "sentence", "phrase" (default) or "token", as in ``EspeakTTSService``.
    min_phrase_chars / first_phrase_words: the phrase aggregator's settings.
    seed: the vocoder's noise seed (the same text gives the same samples).
    start_buffer_s: how much of a reply's audio is made before any of it leaves (or the whole
        first phrase, if shorter): a cushion at the far end for the moment the voice has the
        least made ahead (see ``run_tts``). 0 sends the first chunk as it comes.
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
        if start_buffer_s < 0:
            raise ConfigError(f"start_buffer_s must be >= 0, got {start_buffer_s}")
        if aggregation not in ("sentence", "phrase", "token"):
            raise ConfigError(f"aggregation must be sentence, phrase or token, got {aggregation!r}")
        if engine is None:
            check_voice_dir(model_dir)
        super().__init__(
            text_aggregation_mode=(
                TextAggregationMode.TOKEN if aggregation == "token" else TextAggregationMode.SENTENCE
            ),
            push_text_frames=False,
            push_stop_frames=True,
            push_start_frame=True,
            sample_rate=sample_rate,
            settings=TTSSettings(model="parley-ssm-tts", voice=str(model_dir), language=Language.EN),
            **kwargs,
        )
        if aggregation == "phrase":
            self._text_aggregator = PhraseTextAggregator(
                min_chars=min_phrase_chars, first_words=first_phrase_words,
                language=self._text_aggregator.language,
            )
        self._model_dir = model_dir
        self._engine = engine
        self._seed = seed
        self._start_buffer_s = start_buffer_s
        self._utterances: dict[str, VoiceUtterance | RemoteVoiceUtterance] = {}
        self._context_audio_s: dict[str, float] = {}

    def can_generate_metrics(self) -> bool:
        return True

    async def start(self, frame: StartFrame) -> None:
        await super().start(frame)
        if self._engine is None:  # the first call of the process loads the voice, off the loop
            self._engine = await asyncio.to_thread(SSMVoiceEngine.shared, self._model_dir)

    async def cleanup(self) -> None:
        for utt in self._utterances.values():
            utt.cancel()
        await super().cleanup()

    async def on_audio_context_interrupted(self, context_id: str) -> None:
        utt = self._utterances.get(context_id)
        if utt is not None:
            utt.cancel()
        self._context_audio_s.pop(context_id, None)

    async def on_audio_context_completed(self, context_id: str) -> None:
        self._context_audio_s.pop(context_id, None)

    async def run_tts(self, text: str, context_id: str) -> AsyncGenerator[Frame | None, None]:
        """Speak ``text``, yielding its audio as the voice makes it (each answer of the voice's
        thread: whole 20 ms chunks).

        A reply's first phrase is the exception: its audio is held back until
        ``start_buffer_s`` of it is made (or the whole phrase, if shorter). When a reply starts,
        the far end holds only what has been sent and the voice has nothing made ahead; with
        many calls replying at once the voice makes audio barely faster than real time, and the
        far end ran dry within the first half second of replies (a probe in the pacer placed
        nearly every remaining underrun 120-600 ms into a reply, several calls at the same
        instant). bench_transports, 16 mixed calls on 2 cores, three interleaved rounds: agent
        frames underrun 3, 37 and 2 without the cushion, none in any round with 200 ms. It
        costs one call alone the time to make the extra audio: first byte p50 +6 ms on Twilio,
        +11 ms on WebRTC, +27 ms on SIP (two rounds each). Holding back only while the voice ran
        slow did not save that at one call and let 10 frames underrun in a mixed run, so the
        rule stays this simple; ``start_buffer_s=0`` sends the first answer at once."""
        if self._engine is None:
            yield ErrorFrame(error=f"{self}: run_tts before start")
            return
        utt = self._engine.open(self.sample_rate, seed=self._seed)
        self._utterances[context_id] = utt
        offset_s = self._context_audio_s.get(context_id, 0.0)
        samples = spoken = 0
        written = WrittenWords(text)
        # a reply's first phrase: held back until start_buffer_s of it is made
        held: list[bytes] | None = [] if offset_s == 0.0 and self._start_buffer_s > 0 else None
        await self.start_tts_usage_metrics(text)
        try:
            async with contextlib.aclosing(utt.speak(text)) as chunks:
                async for chunk in chunks:
                    words = []
                    for word, t in chunk.words:
                        label = written.label(spoken, word)
                        spoken += 1
                        if label is not None:
                            words.append((label, offset_s + t))
                    if words:
                        await self.add_word_timestamps(words, context_id)
                    samples += len(chunk.pcm)
                    if held is None:
                        pcm = chunk.pcm.tobytes()
                    else:
                        held.append(chunk.pcm.tobytes())
                        if samples < self._start_buffer_s * self.sample_rate:
                            continue
                        pcm, held = b"".join(held), None
                    await self.stop_ttfb_metrics()
                    yield TTSAudioRawFrame(pcm, self.sample_rate, 1, context_id=context_id)
            if held and not utt.cancelled:  # the whole phrase was shorter than the start buffer
                await self.stop_ttfb_metrics()
                yield TTSAudioRawFrame(b"".join(held), self.sample_rate, 1, context_id=context_id)
            if samples == 0 and not utt.cancelled:
                # Nothing to say (punctuation, emoji): 20 ms of silence, so that pipecat closes
                # the audio context now instead of after its 3 s timeout (which would hold back
                # the next reply) and does not count a silent context against the service.
                logger.debug("%s: nothing to say in a %d-character text", self, len(text))
                samples = self.sample_rate // 50
                yield TTSAudioRawFrame(bytes(2 * samples), self.sample_rate, 1,
                                       context_id=context_id)
            self._context_audio_s[context_id] = offset_s + samples / self.sample_rate
        except (SSMEngineError, PipelineError) as exc:  # a model error, or its process died
            yield ErrorFrame(error=f"{self}: the SSM voice failed: {exc}", exception=exc)
        finally:
            utt.cancel()  # interrupted or closed early: its queued steps are dropped
            if self._utterances.get(context_id) is utt:
                del self._utterances[context_id]
