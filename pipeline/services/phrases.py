"""The phrase cutter every parley voice speaks by (``aggregation="phrase"``).

pipecat 1.14's TTSService buffers LLM tokens until a sentence ends; ``PhraseTextAggregator`` also
cuts after a comma, semicolon, colon or dash once ``min_chars`` have gathered, and a response's
first words as soon as they are complete, so the first audio of a long sentence starts sooner.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from pipecat.utils.string import SENTENCE_ENDING_PUNCTUATION
from pipecat.utils.text.base_text_aggregator import Aggregation as PipecatAggregation
from pipecat.utils.text.base_text_aggregator import TextType
from pipecat.utils.text.simple_text_aggregator import SimpleTextAggregator

__all__ = ["PhraseTextAggregator"]

_PHRASE_MARKS = frozenset(",;:\u2014")


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
