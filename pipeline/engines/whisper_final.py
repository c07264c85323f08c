"""Finals from Whisper tiny.en's own decoder, over the utterance encoded with a little silence.

    wf = WhisperFinal()                          # faster-whisper's CTranslate2 model, int8, 1 thread
    text, confidence, ended = wf.decode(audio_8k, 8000)
    dec = WhisperFinalDecoder(wf, 8000, hints, ctc=FinalPassDecoder(...) or None, whole=...)
    dec.piece(audio); dec.piece(rest); rec = dec.result()    # -> Recognition

Whisper reads 30 s: the speech, then silence up to 30 s, all of it encoded (its own pass takes
about 0.5 s a clip on one core). Its decoder needs those 1,500 frames: given only the
utterance's own frames, it reads the start and then repeats itself ("old-s-y-y-y-y"). Here the
utterance is encoded with ``PAD_S`` of silence after it, and the frames past those are Whisper's
encoding of 30 s of silence, computed once at load: the decoder cross-attends to 1,500 frames
as in training, for the price of encoding the utterance and two seconds. On recorded people
this reads about as well as Whisper's own 30 s pass with its beam of 5, in an eighth of the
time (RESULTS: "bench_whisper_final", "bench_stt_human").

The final-pass worker runs it (``final_procs``, or the engine's thread) when the final model's
folder says so (``decoder.json``: ``{"decoder": "whisper"}``; ``final_decoder``). parley's SSM
still makes every partial and the end of turn's guesses; the CTC final pass (``ctc``) runs
beside it only where its heads do what Whisper's text cannot: a name spelled letter by letter
(its letters are the final) and keyword spotting (its spotted keywords ride on Whisper's text).
A turn's hints reach Whisper's decoder as a prompt (``whisper_prompt``: the text it reads as said
before: the phrases the agent listens for, its keywords, a number read digit by digit, a yes and
a no); a free turn has none.

A generation that does not end within ``MAX_TOKENS_S`` tokens a second of audio (plus 10) is a
loop ("Code Code Code ..."); the CTC final pass decodes that utterance instead. A run of one to
four words repeated ``LOOP_REPEATS`` times in a row within the text is kept once. Silence or noise
that Whisper reads as speech with low confidence (its no-speech probability over
``NO_SPEECH_PROB`` and its mean token log-probability under ``LOW_LOGPROB``: Whisper's own rule,
with a stricter bound than its -1, which silence's "you" passes) is an empty final. Numbers
come out as words (digit and symbol tokens are suppressed). The finals carry no confidence and
no alternatives (None, as a greedy decoder's): Whisper's mean token probability is no posterior
(with it as the confidence, bench_conversations' yes/no understood fell to 0.438 while the
yes and no were heard), so the agent takes the words as heard.
"""

from __future__ import annotations

import json
import logging
import math
import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import soxr

from pipeline.engines.whisper import MODEL_RATE_HZ, WhisperRecognizer
from pipeline.errors import EngineUnavailableError
from ssm_engine.stt.final_pass import FinalPassDecoder, decode_whole
from ssm_engine.stt.hints import DIGIT_WORDS, NO_HINTS, Hints, Recognition
from ssm_engine.stt.text import normalize_text

__all__ = ["WhisperFinal", "WhisperFinalDecoder", "DECODER_FILE", "final_decoder_choice",
           "final_text", "PAD_S", "CHUNK_S"]

logger = logging.getLogger(__name__)

DECODER_FILE = "decoder.json"   # in a final model's folder: {"decoder": "whisper" | "ctc"}
PAD_S = 2.0                     # silence encoded after the utterance (see the module docstring)
CHUNK_S = 18.0                  # a longer utterance is decoded a block at a time as it is spoken
MAX_TOKENS_S = 8.0              # tokens a second of audio, past which a generation is a loop
LOOP_REPEATS = 5                # a run of words said this many times in a row is a loop
NO_SPEECH_PROB = 0.6
LOW_LOGPROB = -0.7              # silence reads as "you" at -1.0; speech's mean is above -0.5
PROMPT_TOKENS = 120             # the most of a turn's prompt the decoder reads (its last tokens)
_MEL_HOP = 160                  # Whisper's log-mel hop at 16 kHz
_FRAMES = 3000                  # 30 s of log-mel frames, 1,500 encoder frames


def final_decoder_choice(final_dir: Path) -> str:
    """The decoder a final model's folder asks for: "whisper" or "ctc" (no file: "ctc")."""
    path = Path(final_dir) / DECODER_FILE
    if not path.exists():
        return "ctc"
    try:
        choice = json.loads(path.read_text()).get("decoder", "ctc")
    except (OSError, ValueError, AttributeError) as exc:
        raise EngineUnavailableError(f"{path} is not a JSON object naming a decoder: {exc}") from None
    if choice not in ("whisper", "ctc"):
        raise EngineUnavailableError(f"{path}: decoder must be 'whisper' or 'ctc', got {choice!r}")
    return choice


class WhisperFinal:
    """Whisper tiny.en's decoder over a short encoding (the module docstring). One per process;
    calls are serialised by the recogniser's lock."""

    def __init__(self, recognizer: WhisperRecognizer | None = None, pad_s: float = PAD_S) -> None:
        self._asr = recognizer or WhisperRecognizer(beam_size=1)
        self.pad_s = pad_s
        self._silence: np.ndarray | None = None     # Whisper's encoding of 30 s of silence
        self._prompt: list[int] = []
        self._suppress: list[int] = [-1]

    def load(self) -> None:
        """Load the model and encode the silence (about a second); idempotent. Raises
        ``EngineUnavailableError`` naming what to install."""
        if self._silence is not None:
            return
        model = self._asr.model                # EngineUnavailableError: what to install
        import ctranslate2                     # faster-whisper's own dependency

        tok = model.hf_tokenizer
        self._prompt = [tok.token_to_id("<|startoftranscript|>"), tok.token_to_id("<|notimestamps|>")]
        mel = model.feature_extractor(np.zeros(_FRAMES * _MEL_HOP + 400, np.float32), padding=0)
        sv = ctranslate2.StorageView.from_array(
            np.ascontiguousarray(mel[None, :, :_FRAMES], dtype=np.float32))
        self._silence = np.array(model.model.encode(sv))
        self._suppress = self._asr.suppress_tokens

    def decode(self, audio: np.ndarray, rate: int, prompt: str = "") -> tuple[str, float, bool]:
        """One utterance (float32 mono at ``rate``, at most 30 s less ``pad_s``) -> (text,
        confidence: the tokens' mean probability, ended: False for a generation cut off as a
        loop). ``prompt``: text the decoder reads as what came before (``whisper_prompt``; its
        last ``PROMPT_TOKENS`` tokens). Blocks for the encoding and the decoding."""
        import ctranslate2

        self.load()
        assert self._silence is not None
        x = np.asarray(audio, np.float32)
        if rate != MODEL_RATE_HZ and x.size:
            x = soxr.resample(x, rate, MODEL_RATE_HZ, quality="HQ")
        limit = int((30.0 - self.pad_s) * MODEL_RATE_HZ)
        x = np.concatenate([x[-limit:], np.zeros(int(self.pad_s * MODEL_RATE_HZ), np.float32)])
        budget = int(10 + MAX_TOKENS_S * x.size / MODEL_RATE_HZ)
        model = self._asr.model
        with self._asr.lock:
            mel = model.feature_extractor(x, padding=0)
            n = min(_FRAMES, mel.shape[1] - mel.shape[1] % 2)
            enc = np.array(model.model.encode(ctranslate2.StorageView.from_array(
                np.ascontiguousarray(mel[None, :, :n], dtype=np.float32))))
            memory = np.concatenate([enc, self._silence[:, enc.shape[1]:]], axis=1)
            start = self._prompt
            if prompt:
                tok = model.hf_tokenizer
                before = tok.encode(" " + prompt.strip(), add_special_tokens=False).ids
                start = [tok.token_to_id("<|startofprev|>"), *before[-PROMPT_TOKENS:], *self._prompt]
            res = model.model.generate(
                ctranslate2.StorageView.from_array(memory), [start], beam_size=1,
                suppress_tokens=self._suppress, max_length=budget + len(start) - len(self._prompt),
                return_scores=True,
                return_no_speech_prob=True)[0]
            ids = [t for t in res.sequences_ids[0] if t < self._prompt[0]]
            text = model.hf_tokenizer.decode(ids).strip()
        ended = len(res.sequences_ids[0]) < budget - len(self._prompt)   # max_length counts the prompt
        logprob = float(res.scores[0]) if res.scores else 0.0
        if res.no_speech_prob > NO_SPEECH_PROB and logprob < LOW_LOGPROB:
            return "", 0.0, True
        return text, math.exp(min(0.0, logprob)), ended


_SPOKEN = {"mr": "mister", "mrs": "missus", "dr": "doctor", "st": "saint", "vs": "versus"}


def _spoken(text: str) -> str:
    """Whisper's written abbreviations as said ("Mr. Smith" -> "mister Smith"): the finals are
    words as spoken, as the SSM's are."""
    return re.sub(r"\b(Mr|Mrs|Dr|St|vs)\.(?=\s|$)", lambda m: _SPOKEN[m.group(1).lower()], text)


_DIGITS = frozenset(DIGIT_WORDS) | {"for", "to", "too"}


def _unloop(text: str, times: int = LOOP_REPEATS) -> str:
    """A run of one to four words said ``times`` times or more in a row, kept once: Whisper's
    loop ("montreal up up up up up ..."). Digits stay as they are: a number's runs are its own
    ("five five five five" in 415 555 ...), and a caller reads them back if one is extra."""
    words, out, i = text.split(), [], 0
    while i < len(words):
        for n in range(1, 5):
            unit, reps = words[i: i + n], 1
            while words[i + reps * n: i + (reps + 1) * n] == unit:
                reps += 1
            if len(unit) == n and reps >= times and not set(unit) <= _DIGITS:
                out += unit
                i += reps * n
                break
        else:
            out.append(words[i])
            i += 1
    return " ".join(out)


def final_text(text: str) -> str:
    """Whisper's written text as a final: words as said, lower case, a loop kept once."""
    return _unloop(normalize_text(_spoken(text)))


def _hinted(text: str, hints: Hints) -> bool:
    """The text is one of the hinted sentences, or a digit string where digits were hinted."""
    if not text:
        return False
    if text in hints.sentences():
        return True
    return "digits" in hints.expect and all(w in DIGIT_WORDS for w in text.split())


_DIGITS_PROMPT = "My number is two four six, eight one three, seven zero nine."
# (no digit twice in a row: with "five five five" in it, "nine nine" was read "nine nine nine")
_YES_NO_PROMPT = "Yes, that's right. No, that's not right."


def whisper_prompt(hints: Hints) -> str:
    """The turn's hints as text Whisper's decoder reads before the caller's words (its
    ``<|startofprev|>``, as Whisper conditions on what was said before): the phrases the agent
    listens for and the keywords it spots, an example of digits read one by one, or a yes and a
    no. "" for free recognition (``NO_HINTS``) and for a name or a spelling alone."""
    parts: list[str] = []
    if "digits" in hints.expect:
        parts.append(_DIGITS_PROMPT)
    if "yes_no" in hints.expect:
        parts.append(_YES_NO_PROMPT)
    parts += [p.strip().capitalize() + "." for p in (*hints.phrases, *hints.keywords) if p.strip()]
    return " ".join(parts)


def _wants_ctc(hints: Hints) -> bool:
    """The CTC final pass runs beside Whisper's: a spelled name, or keywords to spot."""
    return "spelling" in hints.expect or bool(hints.keywords)


class WhisperFinalDecoder:
    """One utterance's final from Whisper's decoder, with the CTC final pass's ``piece`` and
    ``result`` interface (``ssm_engine.stt.final_pass.FinalPassDecoder``). ``ctc``: that pass,
    run beside it (spelling, spotting: ``_wants_ctc``), or None. ``whole(audio)`` decodes an
    utterance with the CTC final pass on fresh state: a loop's fallback."""

    def __init__(self, whisper: WhisperFinal, rate: int, hints: Hints = NO_HINTS, *,
                 ctc: Any = None, whole: Callable[[np.ndarray], Recognition] | None = None) -> None:
        self._whisper, self._rate, self._hints = whisper, rate, hints
        self._prompt = whisper_prompt(hints)
        self._ctc = ctc
        self._whole = whole
        self._block: list[np.ndarray] = []
        self._block_n = 0
        self._texts: list[str] = []
        self._audio: list[np.ndarray] = []       # all of it, for a loop's fallback
        self.pieces = 0

    def piece(self, audio: np.ndarray) -> None:
        if not audio.size:
            return
        self.pieces += 1
        self._audio.append(audio)
        if self._ctc is not None:
            self._ctc.piece(audio)
        self._block.append(audio)
        self._block_n += audio.size
        if self._block_n >= CHUNK_S * self._rate:
            self._decode_block()

    def _decode_block(self) -> bool:
        if not self._block_n:
            return True
        text, _confidence, ended = self._whisper.decode(np.concatenate(self._block), self._rate,
                                                        self._prompt)
        self._block, self._block_n = [], 0
        if text:
            self._texts.append(text)
        return ended

    def result(self) -> Recognition | None:
        if not self.pieces:
            return None
        ctc = self._ctc.result() if self._ctc is not None else None
        if ctc is not None and "spelling" in self._hints.expect:
            return ctc                             # the letters, as spelled
        if not self._decode_block():
            logger.info("STT: Whisper's final did not end (a loop); the CTC final pass decodes "
                        "the utterance")
            if ctc is not None:
                return ctc
            if self._whole is not None:
                return self._whole(np.concatenate(self._audio))
            return None
        text = final_text(" ".join(self._texts))
        return Recognition(text, None, hinted=_hinted(text, self._hints),
                           spotted=ctc.spotted if ctc is not None else ())


_shared_lock = threading.Lock()
_shared: WhisperFinal | None = None


def shared_whisper_final() -> WhisperFinal:
    """One per process (the final-pass worker's, or the engine's thread's)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            wf = WhisperFinal()
            wf.load()
            _shared = wf
        return _shared


def make_final_decoder(model: Any, beam: Any, hints: Hints, whisper: WhisperFinal | None) -> Any:
    """The final-pass decoder of one utterance: the CTC final pass's (``whisper`` None) or
    Whisper's, with the CTC pass beside it where ``_wants_ctc``."""
    if whisper is None:
        return FinalPassDecoder(model, beam, hints)
    ctc = FinalPassDecoder(model, beam, hints) if _wants_ctc(hints) else None
    return WhisperFinalDecoder(whisper, model.config.sample_rate_hz, hints, ctc=ctc,
                               whole=lambda audio: decode_whole(model, beam, hints, audio))


def decode_whole_final(model: Any, beam: Any, hints: Hints, audio: np.ndarray,
                       whisper: WhisperFinal | None) -> Recognition | None:
    """An utterance so far, decoded on fresh state (an early final)."""
    dec = make_final_decoder(model, beam, hints, whisper)
    dec.piece(audio)
    return dec.result()
