"""The voice's spoken words mapped back to the text as written (word timestamps, resuming)."""

from __future__ import annotations

import logging

from ssm_engine.tts.text import expand_chunk, needs_right_context

__all__ = ["WrittenWords"]

logger = logging.getLogger(__name__)


class WrittenWords:
    """Maps the voice's spoken words back to the text as written, for word timestamps.

        ww = WrittenWords("Order 4417 ships Tue.")    # spoken: order four four one seven ships
        ww.label(0, "order") -> "Order"; ww.label(1, "four") -> "4417"; ww.label(2, "four") -> None

    The normaliser reads each whitespace-separated chunk on its own (with the chunk before it
    and, where it needs one, the chunk after: ``expand_chunk``), so each spoken word belongs to
    exactly one written chunk. A chunk is reported at the start of its first spoken word, as
    the LLM wrote it: pipecat matches word timestamps against the LLM's text, and the
    conversation keeps the written words ("4417", not "four four one seven"). Should the voice
    ever say a word the mapping did not expect, the spoken words are reported from there on."""

    def __init__(self, text: str) -> None:
        chunks = text.split()
        self._expected: list[str] = []
        self._labels: list[str | None] = []
        self._chunk_of: list[int] = []        # spoken word -> its written chunk
        self._first_spoken: list[int] = []    # written chunk -> its first spoken word
        for i, chunk in enumerate(chunks):
            nxt = chunks[i + 1] if i + 1 < len(chunks) and needs_right_context(chunk) else None
            words = [w.text for w in expand_chunk(chunks[i - 1] if i else None, chunk, nxt)
                     if w.kind in ("word", "letter")]
            self._first_spoken.append(len(self._expected))
            self._expected += words
            self._labels += [chunk] + [None] * (len(words) - 1) if words else []
            self._chunk_of += [i] * len(words)
        self._chunks = chunks
        self._diverged = False

    def label(self, index: int, spoken: str) -> str | None:
        """What to report for the ``index``-th spoken word (None: part of an earlier chunk)."""
        if not self._diverged and (index >= len(self._expected) or self._expected[index] != spoken):
            logger.debug("spoken word %d is not the expected one; reporting spoken words", index)
            self._diverged = True
        return spoken if self._diverged else self._labels[index]

    def rest_from(self, index: int) -> tuple[str, int]:
        """The text from the written chunk of the ``index``-th spoken word on, and the spoken
        index that text starts at: what to ask a voice for when speech stopped at that word
        (a replica died mid-reply). Past the mapping: the empty text."""
        if index >= len(self._chunk_of):
            return "", len(self._expected)
        k = self._chunk_of[index]
        return " ".join(self._chunks[k:]), self._first_spoken[k]

