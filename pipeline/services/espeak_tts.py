"""espeak-ng as a streaming pipecat TTS service with word timestamps and immediate barge-in.

    tts = EspeakTTSService(voice="en-us", rate_wpm=175, chunk_ms=20)
    tts = EspeakTTSService(text_aggregation_mode=TextAggregationMode.TOKEN)  # caller flushes

``run_tts`` starts the synthesis on a worker thread and yields ``TTSAudioRawFrame``s of exactly
``chunk_ms`` (the last one shorter) as the engine produces audio, so the first frame leaves about
a millisecond after the text arrives. Word start times from espeak-ng go to
``add_word_timestamps``, offset by the audio already spoken in the same audio context (one LLM
turn shares one context), so pipecat emits the ``TTSTextFrame``s in step with playback.

Text aggregation (``aggregation=``): pipecat 1.14's TTSService buffers LLM tokens until a sentence
ends ("sentence", its default). "phrase" also cuts after a comma, semicolon, colon or dash once
``min_phrase_chars`` have gathered, so the first audio of a long sentence starts sooner.
"token" hands each piece of text to ``run_tts`` as it comes (pipecat's
``TextAggregationMode.TOKEN``): use it only when the frames upstream already carry whole phrases,
since espeak would speak each LLM token as an utterance of its own. ``LLMFullResponseEndFrame``
flushes whatever is buffered in every mode.

Barge-in: on ``InterruptionFrame`` the base class cancels the task running ``run_tts`` and drops
the interrupted audio contexts; ``on_audio_context_interrupted`` and the generator's ``finally``
both set the utterance's cancel event, so the engine stops at its next callback (within ~50 ms
of audio, microseconds of wall time) and no audio of that context is pushed afterwards.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import warnings
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Literal
from concurrent.futures import ThreadPoolExecutor

from pipecat.frames.frames import ErrorFrame, Frame, StartFrame, TTSAudioRawFrame
from pipecat.services.settings import TTSSettings
from pipecat.transcriptions.language import Language
from pipecat.utils.string import SENTENCE_ENDING_PUNCTUATION
from pipecat.utils.text.base_text_aggregator import Aggregation as PipecatAggregation
from pipecat.utils.text.base_text_aggregator import TextType
from pipecat.utils.text.simple_text_aggregator import SimpleTextAggregator

with warnings.catch_warnings():
    # pipecat 1.14's tts_service module subclasses its own deprecated AudioContextTTSService
    # while it is imported; the warning is about pipecat's code, not ours.
    warnings.filterwarnings(
        "ignore", message=".*AudioContextTTSService.*", category=DeprecationWarning
    )
    from pipecat.services.tts_service import TextAggregationMode, TTSService

from pipeline.engines.espeak import EspeakEngine, SynthChunk
from pipeline.errors import ConfigError, PipelineError

logger = logging.getLogger(__name__)

_DONE = object()
_PHRASE_MARKS = frozenset(",;:\u2014")

Aggregation = Literal["sentence", "phrase", "token"]


class PhraseTextAggregator(SimpleTextAggregator):
    """pipecat's sentence aggregator that also cuts after ``, ; : —`` and a space.

    A phrase is cut only when no sentence boundary is pending in the buffer (the sentence logic
    keeps its lookahead) and the phrase has at least ``min_chars`` characters.

    ``first_words``: the first cut of each response comes as soon as that many words are
    complete, so speech starts one word after the LLM's first token instead of one phrase after
    it (benchmarks/bench_llm_to_audio.py measures the difference); 0 turns this off.
    """

    def __init__(self, *, min_chars: int = 12, first_words: int = 1, language: str | None = None) -> None:
        super().__init__(aggregation_type=TextType.SENTENCE, language=language)
        self._min_chars = min_chars
        self._first_words = first_words
        self._cuts = 0  # cuts made in the current response

    async def aggregate(self, text: str) -> AsyncIterator[PipecatAggregation]:
        for char in text:
            async for sentence in super().aggregate(char):
                self._cuts += 1
                yield sentence
            buffered = self._text
            if (
                char.isspace()
                and buffered.rstrip()[-1:] in _PHRASE_MARKS
                and len(buffered.strip()) >= self._min_chars
                and not any(c in SENTENCE_ENDING_PUNCTUATION for c in buffered)
            ):
                self._text = ""
                self._cuts += 1
                yield PipecatAggregation(text=buffered.strip(), type=TextType.SENTENCE)
        # The response's first words go out as soon as the text that came so far completes them
        # (a whole sentence that arrived at once was cut above, with its prosody intact).
        if self._cuts == 0 and self._first_words > 0:
            head, sep, tail = self._text.rpartition(" ")
            if (sep and len(head.split()) >= self._first_words
                    and not any(c in SENTENCE_ENDING_PUNCTUATION for c in head)):
                self._text = tail
                self._cuts += 1
                yield PipecatAggregation(text=head.strip(), type=TextType.SENTENCE)

    async def flush(self) -> PipecatAggregation | None:
        self._cuts = 0  # the response is over: the next one starts with a quick first cut again
        return await super().flush()

    async def handle_interruption(self):
        self._cuts = 0
        await super().handle_interruption()


class EspeakTTSService(TTSService):
    """espeak-ng TTS for pipecat.

    voice: espeak-ng voice, ``lang[+variant]`` (variants are case-sensitive), e.g. "en-us+f3".
    rate_wpm: speaking rate, 80..450 words per minute.
    chunk_ms: duration of each ``TTSAudioRawFrame``.
    sample_rate: output rate; None takes the pipeline's ``audio_out_sample_rate``.
    aggregation: "sentence" (default), "phrase" or "token" (see the module docstring).
    min_phrase_chars: shortest phrase "phrase" aggregation cuts off.
    first_phrase_words: "phrase" speaks each response's first N words at once (0: off).
    """

    def __init__(
        self,
        *,
        voice: str = "en-us",
        rate_wpm: int = 175,
        pitch: int = 50,
        chunk_ms: int = 20,
        sample_rate: int | None = None,
        aggregation: Aggregation = "sentence",
        min_phrase_chars: int = 12,
        first_phrase_words: int = 1,
        **kwargs,
    ) -> None:
        if chunk_ms <= 0:
            raise ConfigError(f"chunk_ms must be positive, got {chunk_ms}")
        if aggregation not in ("sentence", "phrase", "token"):
            raise ConfigError(f"aggregation must be sentence, phrase or token, got {aggregation!r}")
        super().__init__(
            text_aggregation_mode=(
                TextAggregationMode.TOKEN
                if aggregation == "token"
                else TextAggregationMode.SENTENCE
            ),
            push_text_frames=False,
            push_stop_frames=True,
            push_start_frame=True,
            sample_rate=sample_rate,
            settings=TTSSettings(model="espeak-ng", voice=voice, language=Language.EN),
            **kwargs,
        )
        if aggregation == "phrase":
            # pipecat 1.14 takes no aggregator argument; its own is swapped for a phrase cutter.
            self._text_aggregator = PhraseTextAggregator(
                min_chars=min_phrase_chars, first_words=first_phrase_words,
                language=self._text_aggregator.language,
            )
        self._voice = voice
        self._rate_wpm = rate_wpm
        self._pitch = pitch
        self._chunk_ms = chunk_ms
        self._engine: EspeakEngine | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._cancels: dict[str, threading.Event] = {}
        self._context_audio_s: dict[str, float] = {}

    def can_generate_metrics(self) -> bool:
        return True

    async def start(self, frame: StartFrame) -> None:
        await super().start(frame)
        self._engine = EspeakEngine(
            voice=self._voice,
            rate_wpm=self._rate_wpm,
            pitch=self._pitch,
            sample_rate_hz=self.sample_rate,
        )
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="espeak-tts")

    async def cleanup(self) -> None:
        for cancel in self._cancels.values():
            cancel.set()
        if self._executor is not None:
            self._executor.shutdown(wait=False)
            self._executor = None
        await super().cleanup()

    async def on_audio_context_interrupted(self, context_id: str) -> None:
        cancel = self._cancels.get(context_id)
        if cancel is not None:
            cancel.set()
        self._context_audio_s.pop(context_id, None)

    async def on_audio_context_completed(self, context_id: str) -> None:
        self._context_audio_s.pop(context_id, None)

    async def run_tts(self, text: str, context_id: str) -> AsyncGenerator[Frame | None, None]:
        """Synthesize ``text``, yielding ``chunk_ms`` audio frames as they are produced."""
        if self._engine is None or self._executor is None:
            yield ErrorFrame(error=f"{self}: run_tts before start")
            return
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[object] = asyncio.Queue()
        cancel = threading.Event()
        self._cancels[context_id] = cancel
        engine = self._engine

        def on_chunk(chunk: SynthChunk) -> bool:  # on the synthesis thread
            loop.call_soon_threadsafe(queue.put_nowait, chunk)
            return cancel.is_set()

        def synthesize() -> bool:
            try:
                return engine.synthesize_stream(text, on_chunk, cancel)
            finally:
                loop.call_soon_threadsafe(queue.put_nowait, _DONE)

        chunk_bytes = self.sample_rate * self._chunk_ms // 1000 * 2
        offset_s = self._context_audio_s.get(context_id, 0.0)
        produced_bytes = 0
        pending = bytearray()
        await self.start_tts_usage_metrics(text)
        done = loop.run_in_executor(self._executor, synthesize)
        try:
            while (item := await queue.get()) is not _DONE:
                assert isinstance(item, SynthChunk)
                await self.stop_ttfb_metrics()
                if item.words:
                    await self.add_word_timestamps(
                        [(w, offset_s + t) for w, t in item.words], context_id
                    )
                pending += item.pcm.tobytes()
                produced_bytes += len(item.pcm) * 2
                while len(pending) >= chunk_bytes:
                    yield self._frame(bytes(pending[:chunk_bytes]), context_id)
                    del pending[:chunk_bytes]
            if pending:
                yield self._frame(bytes(pending), context_id)
            await done
            self._context_audio_s[context_id] = offset_s + produced_bytes / 2 / self.sample_rate
        except PipelineError as exc:
            yield ErrorFrame(error=f"{self}: espeak-ng failed: {exc}", exception=exc)
        finally:
            cancel.set()  # interrupted or closed early: the engine stops at its next callback
            if self._cancels.get(context_id) is cancel:
                del self._cancels[context_id]

    def _frame(self, audio: bytes, context_id: str) -> TTSAudioRawFrame:
        return TTSAudioRawFrame(audio, self.sample_rate, 1, context_id=context_id)
