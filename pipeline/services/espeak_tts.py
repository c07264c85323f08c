"""espeak-ng as a streaming pipecat TTS service with word timestamps and immediate barge-in.

    tts = EspeakTTSService(voice="en-us", rate_wpm=175, chunk_ms=20)
    tts = EspeakTTSService(aggregation="token")          # the frames upstream carry whole phrases

It is ``VoiceTTSService`` (read its docstring: text aggregation, word timestamps, barge-in) on
an ``EspeakVoice`` (``pipeline.engines.espeak``): the library runs on the process's espeak-ng
thread and its audio comes out in ``TTSAudioRawFrame``s of exactly ``chunk_ms`` (the last one
shorter) as it is produced, so the first frame leaves about a millisecond after the text
arrives. A cancelled utterance stops at the library's next callback (within ~50 ms of audio,
microseconds of wall time) and no audio of that context is pushed afterwards. Its default text
aggregation is "sentence".
"""

from __future__ import annotations

from pipecat.services.settings import TTSSettings
from pipecat.transcriptions.language import Language

from pipeline.engines.espeak import EspeakVoice
from pipeline.services.phrases import PhraseTextAggregator
from pipeline.services.voice_tts import Aggregation, VoiceTTSService

__all__ = ["EspeakTTSService", "PhraseTextAggregator"]


class EspeakTTSService(VoiceTTSService):
    """espeak-ng TTS for pipecat.

    voice: espeak-ng voice, ``lang[+variant]`` (variants are case-sensitive), e.g. "en-us+f3".
    rate_wpm: speaking rate, 80..450 words per minute.
    chunk_ms: duration of each ``TTSAudioRawFrame``.
    sample_rate: output rate; None takes the pipeline's ``audio_out_sample_rate``.
    aggregation: "sentence" (default), "phrase" or "token" (see ``VoiceTTSService``).
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
        super().__init__(
            voice=EspeakVoice(voice, rate_wpm, pitch, chunk_ms),
            settings=TTSSettings(model="espeak-ng", voice=voice, language=Language.EN),
            sample_rate=sample_rate, aggregation=aggregation, min_phrase_chars=min_phrase_chars,
            first_phrase_words=first_phrase_words, **kwargs,
        )

    async def start(self, frame) -> None:
        await super().start(frame)
        assert isinstance(self.voice, EspeakVoice)
        self.voice.engine(self.sample_rate)   # voice, rate and pitch checked now, not at the first reply
