"""The one pipecat TTS service every parley voice speaks through (``pipeline.engines.speaking``).

    tts = VoiceTTSService(voice=EspeakVoice("en-us"), settings=...)   # or SSMTTSService(), ...

``run_tts`` opens an utterance on the voice for each piece of text the aggregator cuts and
yields its audio as the voice makes it (one ``TTSAudioRawFrame`` per ``SpeechChunk``).

Text aggregation (``aggregation=``): pipecat 1.14's TTSService buffers LLM tokens until a
sentence ends ("sentence"); "phrase" also cuts after a comma, semicolon, colon or dash once
``min_phrase_chars`` have gathered and speaks each reply's first ``first_phrase_words`` words at
once (``phrases.PhraseTextAggregator``); "token" hands each piece of text to ``run_tts`` as it
comes (pipecat's ``TextAggregationMode.TOKEN``): use it only when the frames upstream already
carry whole phrases. ``LLMFullResponseEndFrame`` flushes whatever is buffered in every mode.

Word timestamps go to ``add_word_timestamps``, offset by the audio already spoken in the audio
context (one LLM turn shares one context), so pipecat emits the ``TTSTextFrame``s in step with
playback. They carry the words as written: a voice whose words are the ones it spoke (the SSM
voice says "four four one seven") is mapped back through ``WrittenWords`` ("4417" is reported
once, at the start of its first spoken word), so pipecat matches them to the LLM's text and the
conversation keeps what the LLM wrote, cut where the caller stopped hearing it.

Barge-in: on ``InterruptionFrame`` the base class cancels the task running ``run_tts`` and drops
the interrupted audio contexts; ``on_audio_context_interrupted`` and the generator's ``finally``
both cancel the utterance, so the voice stops making audio and none of that context is pushed
afterwards. An engine error (one of the voice's ``errors``) ends that utterance with an
``ErrorFrame`` and the call goes on. Text with nothing to say (only punctuation, emoji) gives
20 ms of silence and a debug line, so pipecat closes the audio context at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import warnings
from collections.abc import AsyncGenerator, Callable
from typing import Literal

from pipecat.frames.frames import ErrorFrame, Frame, StartFrame, TTSAudioRawFrame
from pipecat.services.settings import TTSSettings

with warnings.catch_warnings():
    # pipecat 1.14's tts_service module subclasses its own deprecated AudioContextTTSService
    # while it is imported; the warning is about pipecat's code, not ours.
    warnings.filterwarnings(
        "ignore", message=".*AudioContextTTSService.*", category=DeprecationWarning
    )
    from pipecat.services.tts_service import TextAggregationMode, TTSService

from pipeline.engines.speaking import SpokenUtterance, Voice
from pipeline.engines.written import WrittenWords
from pipeline.errors import ConfigError
from pipeline.services.phrases import PhraseTextAggregator

__all__ = ["Aggregation", "VoiceTTSService"]

logger = logging.getLogger(__name__)

Aggregation = Literal["sentence", "phrase", "token"]


class VoiceTTSService(TTSService):
    """A ``speaking.Voice`` as a pipecat TTS service (see the module docstring).

    voice: the voice, or None with ``load_voice``: called off the event loop at ``start``
        (loading a model takes a while; the first call of the process pays it).
    sample_rate: output rate; None takes the pipeline's ``audio_out_sample_rate``.
    aggregation: "sentence", "phrase" or "token" (default "phrase").
    min_phrase_chars / first_phrase_words: the phrase aggregator's settings.
    seed: the voice's noise seed (the same text gives the same samples), where it has one.
    start_buffer_s: how much of a reply's first phrase is made before any of it leaves (or the
        whole phrase, if shorter); 0 sends the first chunk as it comes (see ``SSMTTSService``).
    settings: pipecat's description of the voice (model, voice, language).
    """

    def __init__(
        self,
        *,
        voice: Voice | None = None,
        load_voice: Callable[[], Voice] | None = None,
        settings: TTSSettings,
        sample_rate: int | None = None,
        aggregation: Aggregation = "phrase",
        min_phrase_chars: int = 12,
        first_phrase_words: int = 1,
        seed: int = 0,
        start_buffer_s: float = 0.0,
        **kwargs,
    ) -> None:
        if start_buffer_s < 0:
            raise ConfigError(f"start_buffer_s must be >= 0, got {start_buffer_s}")
        if aggregation not in ("sentence", "phrase", "token"):
            raise ConfigError(f"aggregation must be sentence, phrase or token, got {aggregation!r}")
        if voice is None and load_voice is None:
            raise ConfigError("VoiceTTSService needs a voice or load_voice")
        super().__init__(
            text_aggregation_mode=(
                TextAggregationMode.TOKEN if aggregation == "token" else TextAggregationMode.SENTENCE
            ),
            push_text_frames=False,
            push_stop_frames=True,
            push_start_frame=True,
            sample_rate=sample_rate,
            settings=settings,
            **kwargs,
        )
        if aggregation == "phrase":
            # pipecat 1.14 takes no aggregator argument; its own is swapped for a phrase cutter.
            self._text_aggregator = PhraseTextAggregator(
                min_chars=min_phrase_chars, first_words=first_phrase_words,
                language=self._text_aggregator.language,
            )
        self._voice = voice
        self._load_voice = load_voice
        self._seed = seed
        self._start_buffer_s = start_buffer_s
        self._utterances: dict[str, SpokenUtterance] = {}
        self._context_audio_s: dict[str, float] = {}

    @property
    def voice(self) -> Voice | None:
        return self._voice

    def can_generate_metrics(self) -> bool:
        return True

    async def start(self, frame: StartFrame) -> None:
        await super().start(frame)
        if self._voice is None and self._load_voice is not None:
            self._voice = await asyncio.to_thread(self._load_voice)

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
        """Speak ``text``, yielding its audio as the voice makes it; a reply's first phrase is
        held back until ``start_buffer_s`` of it is made (or the whole phrase, if shorter)."""
        voice = self._voice
        if voice is None:
            yield ErrorFrame(error=f"{self}: run_tts before start")
            return
        try:
            utt = voice.open(self.sample_rate, seed=self._seed)
        except voice.errors as exc:
            yield ErrorFrame(error=f"{self}: {voice.voice_name} failed: {exc}", exception=exc)
            return
        self._utterances[context_id] = utt
        offset_s = self._context_audio_s.get(context_id, 0.0)
        samples = spoken = 0
        written = None if voice.written_words else WrittenWords(text)
        held: list[bytes] | None = [] if offset_s == 0.0 and self._start_buffer_s > 0 else None
        await self.start_tts_usage_metrics(text)
        try:
            async with contextlib.aclosing(utt.speak(text)) as chunks:
                async for chunk in chunks:
                    words = []
                    for word, t in chunk.words:
                        label = written.label(spoken, word) if written is not None else word
                        spoken += 1
                        if label is not None:
                            words.append((label, offset_s + t))
                    if words:
                        await self.add_word_timestamps(words, context_id)
                    if not len(chunk.pcm):
                        continue
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
        except voice.errors as exc:  # a model error, or its process died
            yield ErrorFrame(error=f"{self}: {voice.voice_name} failed: {exc}", exception=exc)
        finally:
            utt.cancel()  # interrupted or closed early: its queued work is dropped
            if self._utterances.get(context_id) is utt:
                del self._utterances[context_id]
