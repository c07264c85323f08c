"""Align the teacher's segments to our phone tokens: per-token durations in 10 ms frames.

    audio, durations = align(tokens, [teacher.synthesize(festival_words(s)) for s in
                                      split_sentences(tokens)])
    # len(audio) == sum(durations) * HOP; len(durations) == len(tokens)

Festival says exactly our words (``festival_words``; a spelled letter in upper case, so "A" is
the letter "ey", not the article), one sentence per call, so its words and
ours pair up one to one. Within a word, festival's phone times are taken when its phones equal
ours; otherwise the word's span is spread over our phones (a vowel weighs 2, a consonant 1).
Silence between two words goes to the last pause token between them (a pause festival did not
make gets 0 frames; a pause we have no token for is added to the word before it). The first
sentence's leading silence is cut; a later sentence's leading silence, and each sentence's
trailing silence, belong to the previous ``end``/``qend`` token. Frame counts come from
cumulative boundaries (``round(t * 100)``), so they sum exactly to the audio's frame count.
"""

from __future__ import annotations

import numpy as np

from .errors import TeacherError
from .lexicon import VOWELS
from .phonemes import PAUSES, PhoneToken
from .teacher import SAMPLE_RATE_HZ, Segment

__all__ = ["HOP", "FRAME_RATE_HZ", "PAUSE_PUNCT", "split_sentences", "festival_words", "align"]

HOP = 160                       # samples per frame at 16 kHz: 10 ms
FRAME_RATE_HZ = SAMPLE_RATE_HZ // HOP
PAUSE_PUNCT = {"pau": ",", "end": ".", "qend": "?"}   # what a teacher reads for a pause token


def split_sentences(tokens: list[PhoneToken]) -> list[list[PhoneToken]]:
    """Cuts after every ``end``/``qend`` token (the last token must be one)."""
    if not tokens or tokens[-1].symbol not in ("end", "qend"):
        raise TeacherError("tokens must end with an end or qend token")
    out: list[list[PhoneToken]] = [[]]
    for t in tokens:
        out[-1].append(t)
        if t.symbol in ("end", "qend"):
            out.append([])
    return [s for s in out if s]


def festival_words(sentence: list[PhoneToken]) -> list[str]:
    """What festival is asked to say: our words and ",", ".", "?" for the pause tokens."""
    out: list[str] = []
    last_word = None
    for t in sentence:
        if t.symbol in PAUSES:
            out.append(PAUSE_PUNCT[t.symbol])
            last_word = None
        elif t.word_index != last_word:
            word = t.word or ""
            # a spelled letter goes in upper case: festival says "A" as "ey", "a" as "ax"
            spelled = len(word) == 1 and (word != "a" or t.symbol == "ey")
            out.append(word.upper() if spelled else word)
            last_word = t.word_index
    return out


def _festival_groups(segs: list[Segment]) -> list[tuple[str, list[tuple[float, float, str]]]]:
    """Festival's words in order: (name, [(start_s, end_s, phone), ...])."""
    groups: list[tuple[str, list[tuple[float, float, str]]]] = []
    last_id = None
    start = 0.0
    for s in segs:
        if s.phone != "pau":
            if s.word_id != last_id:
                groups.append((s.word, []))
                last_id = s.word_id
            groups[-1][1].append((start, s.end_s, s.phone))
        else:
            last_id = None
        start = s.end_s
    return groups


def _same_word(ours: str, theirs: str) -> bool:
    a, b = ours.replace("'", ""), theirs.replace("'", "")
    return a == b or a.startswith(b) or b.startswith(a)


def _word_ends(phones: list[PhoneToken], fest: list[tuple[float, float, str]]) -> list[float]:
    if [p.symbol for p in phones] == [f[2] for f in fest]:
        return [f[1] for f in fest]
    start, end = fest[0][0], fest[-1][1]
    weights = np.array([2.0 if p.symbol in VOWELS else 1.0 for p in phones])
    return list(start + (end - start) * np.cumsum(weights) / weights.sum())


def _sentence_ends(sentence: list[PhoneToken], segs: list[Segment],
                   length_s: float) -> tuple[list[float], float]:
    """End time (local seconds) of every token of one sentence, and the first phone's start."""
    groups = _festival_groups(segs)
    words: list[list[int]] = []
    for i, t in enumerate(sentence):
        if t.symbol not in PAUSES:
            if not words or sentence[words[-1][0]].word_index != t.word_index:
                words.append([])
            words[-1].append(i)
    if len(groups) != len(words):
        raise TeacherError(f"festival said {len(groups)} words, we have {len(words)}: "
                           f"{[g[0] for g in groups]} vs {[sentence[w[0]].word for w in words]}")
    ends = [0.0] * len(sentence)
    for w, (name, fest) in zip(words, groups):
        ours = sentence[w[0]].word or ""
        if not _same_word(ours, name):
            raise TeacherError(f"festival's word {name!r} does not match ours {ours!r}")
        for i, end_s in zip(w, _word_ends([sentence[i] for i in w], fest)):
            ends[i] = end_s
    # pauses: the last pause token of a gap takes the gap; earlier ones end where it starts
    starts_of_next = {w[0]: g[1][0][0] for w, g in zip(words, groups)}
    for i, t in enumerate(sentence):
        if t.symbol in PAUSES and i == len(sentence) - 1:
            ends[i] = length_s
        elif t.symbol in PAUSES:
            prev_end = ends[i - 1] if i else 0.0
            nxt = next((j for j in range(i + 1, len(sentence))
                        if sentence[j].symbol not in PAUSES or j == len(sentence) - 1), None)
            if nxt is not None and sentence[nxt].symbol in PAUSES:      # trailing gap
                ends[i] = prev_end
            elif nxt is not None and (i + 1 == nxt):
                ends[i] = max(prev_end, starts_of_next[nxt])
            else:
                ends[i] = prev_end
        elif i and sentence[i - 1].symbol not in PAUSES and i in starts_of_next:
            ends[i - 1] = max(ends[i - 1], starts_of_next[i])     # a pause with no token of ours
    ends = list(np.maximum.accumulate(np.asarray(ends)))
    return ends, groups[0][1][0][0]


def align(tokens: list[PhoneToken], spoken: list[tuple[np.ndarray, list[Segment]]]
          ) -> tuple[np.ndarray, list[int]]:
    """Joins the sentences' audio and returns (16 kHz float32 audio, frames per token)."""
    sentences = split_sentences(tokens)
    if len(sentences) != len(spoken):
        raise TeacherError(f"{len(sentences)} sentences but {len(spoken)} teacher outputs")
    boundaries: list[float] = []
    pieces: list[np.ndarray] = []
    offset = 0.0
    for k, (sentence, (audio, segs)) in enumerate(zip(sentences, spoken)):
        length_s = len(audio) / SAMPLE_RATE_HZ
        ends, first_start = _sentence_ends(sentence, segs, length_s)
        if k == 0:
            cut = int(round(first_start * SAMPLE_RATE_HZ))
            audio = audio[cut:]
            offset = -cut / SAMPLE_RATE_HZ
        else:       # this sentence's leading silence belongs to the previous end token
            boundaries[-1] = offset + first_start
        boundaries += [offset + e for e in ends]
        pieces.append(audio)
        offset += length_s
    joined = np.concatenate(pieces).astype(np.float32)
    boundaries[-1] = len(joined) / SAMPLE_RATE_HZ
    frames = np.round(np.asarray(boundaries) * FRAME_RATE_HZ).astype(np.int64)
    frames = np.maximum.accumulate(np.maximum(frames, 0))
    durations = np.diff(np.concatenate([[0], frames])).tolist()
    n = int(frames[-1]) * HOP
    joined = joined[:n] if len(joined) >= n else np.pad(joined, (0, n - len(joined)))
    return joined, [int(d) for d in durations]
