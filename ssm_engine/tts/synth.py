"""Streaming synthesis with a trained voice: text in as it arrives, 20 ms chunks out.

    voice = TTSVoice.load("models/tts")
    stream = voice.open_stream()
    stream.push_text("Your order ships ")       # e.g. tokens from an LLM, as they come
    for chunk in stream.pull():                 # whatever can be spoken already
        play(chunk.pcm)                         # float32 at voice.sample_rate_hz
    stream.push_text("on Tuesday.")
    stream.end_text()
    chunks = stream.pull()                      # the rest; stream.done is now True
    whole = voice.synthesize("Your order ships on Tuesday.")   # the same samples, in one piece
    firsts = voice.pull_many(streams, max_chunks=1)   # many streams, batched model steps

How a phone becomes sound: the incremental phonemizer releases phone tokens once their word can
no longer change; a phone is encoded once ``lookahead`` more phones are known (or the text has
ended); its duration is predicted; its frames join a queue of decoder inputs, and every
``frames_per_step`` (4) queued frames take one step of the causal acoustic stack (40 ms of audio
per step: per-step overhead, not arithmetic, is what costs at batch 1); the vocoder turns each
10 ms frame into final samples at once. The stream carries the encoder's and the decoder's SSM
states, the vocoder's state and the text so far; nothing grows with the length of the call
except the (bounded, trimmed) window of phone tokens.

Questions rise: a yes/no question (its sentence or its last clause starts with an auxiliary:
"Is that right?", "..., can I take a message?") has its log f0 raised over the phones within the
look-ahead of its "?", up to ``question_rise_st`` semitones (default 6) on the last one, a ramp
frame by frame. Wh-questions ("What time works for you?") fall, as statements do, and are left
alone. The voices learn little of this themselves: festival's slt teacher does not rise at all,
and the joe voice regresses Piper's varied rises to a shallow mean (bench_tts, "prosody").

Every phone is encoded on a window of exactly ``2 * lookahead + 1`` token slots (padding where the
text starts or has ended), so the arithmetic, and therefore the samples, do not depend on how the
text was split into pushes. ``TTSStream.cancel()`` drops everything not yet pulled.

Many streams at once: ``TTSVoice.pull_many`` takes each stream as far as it goes without the
model (``TTSStream._advance``), then runs one encoder step for every stream with a phone to speak
and one decoder step for every stream with a group of frames to decode, on the streams' states
concatenated (each stream's state then a row of the batch; the same streams stepping together
again reuse that batch without a copy). A batch-1 step costs about what a batch-16 step does, so
this is what lets one voice thread serve many calls. The samples equal each stream's own up to
float rounding (batched matmuls round differently: ~1e-8).
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..device import model_device
from ..state import StackState
from .errors import TextError, TTSError
from .model import TTSModel, frame_position, load_tts
from .vocoder import HOP_SAMPLES, LF0, SAMPLE_RATE_HZ, StreamingVocoder, vocode_streams

__all__ = ["TTSVoice", "TTSStream", "AudioChunk", "Synthesis", "PAUSE_SYMBOLS", "QUESTION_RISE_ST"]


class _Phone(enum.Enum):
    PHONE = "phone"


PHONE = _Phone.PHONE            # TTSStream._advance: "my next phone can be spoken"
PAUSE_SYMBOLS = frozenset({"pau", "end", "qend"})
QUESTION_RISE_ST = 6.0         # semitones a yes/no question's last phone is raised
# a sentence or clause that starts with one of these and ends in "?" asks yes or no
AUXILIARIES = frozenset({
    "is", "are", "am", "was", "were", "do", "does", "did", "can", "could", "will", "would",
    "shall", "should", "may", "might", "must", "have", "has", "had", "isn't", "aren't", "wasn't",
    "weren't", "don't", "doesn't", "didn't", "can't", "couldn't", "won't", "wouldn't",
    "shouldn't", "haven't", "hasn't", "hadn't",
})
_LEAD_INS = frozenset({"and", "so", "but", "also", "then", "now", "or"})   # "and is it ...?"
MAX_PHONE_FRAMES = 60          # a predicted duration never exceeds 600 ms
DEFAULT_CHUNK_FRAMES = 2       # 20 ms chunks


@dataclass(frozen=True)
class AudioChunk:
    """``pcm``: float32 samples at 16 kHz. ``start_s``: its offset in the utterance. ``words``:
    ``(word, start_s)`` of the words whose first phone starts inside this chunk."""

    pcm: np.ndarray
    start_s: float
    words: tuple[tuple[str, float], ...] = ()

    @property
    def duration_s(self) -> float:
        return len(self.pcm) / SAMPLE_RATE_HZ


@dataclass(frozen=True)
class Synthesis:
    pcm: np.ndarray
    words: tuple[tuple[str, float], ...]
    sample_rate_hz: int = SAMPLE_RATE_HZ

    @property
    def duration_s(self) -> float:
        return len(self.pcm) / self.sample_rate_hz


class TTSVoice:
    """A loaded voice. Thread-safe: each stream's compute runs under the voice's lock."""

    def __init__(self, model: TTSModel) -> None:
        self.model = model.eval()
        self.device = model_device(model)   # inputs go there; features come back to the CPU
        self.lock = threading.Lock()
        self.sample_rate_hz = SAMPLE_RATE_HZ
        # per state kind: (stream ids, batched state, its rows) of the last batched step
        self._last_batch: dict[str, tuple[list[int], StackState, list[StackState]]] = {}
        # a lone stream's phone and frame steps, compiled by compile_steps (None: eager)
        self._lone_phone: Callable[..., tuple[torch.Tensor, torch.Tensor]] | None = None
        self._lone_frames: Callable[..., torch.Tensor] | None = None

    @classmethod
    def load(cls, directory: str | Path, device: str | torch.device = "cpu") -> TTSVoice:
        """The voice in ``directory`` with its model on ``device`` (``resolve_device``'s)."""
        return cls(load_tts(directory).to(device))

    def compile_steps(self) -> None:
        """Compile a lone stream's two model steps, a phone's (look-ahead convolutions, encoder
        SSM step, duration) and a group of frames' (decoder SSM step, features), with
        torch.compile (inductor, C++ on CPU), and compile them now. At batch 1 a step's cost is
        per-op overhead, which the compiled graph removes: the decoder step runs ~2.7x faster
        (1.0 ms against 2.6 ms, one thread), the voice's real-time factor by about a third
        (0.055 against 0.084, benchmarks/bench_tts.py). Batches of streams stay eager: there a step is memory-bound
        and compiling it was measured slower (``ssm_engine.mamba2``), and a graph per batch size
        would mean a compile whenever a new size turned up. The same samples, float rounding
        aside (~1e-6). Compiling takes 10-20 s cold, a few seconds from inductor's on-disk cache;
        it needs a C++ compiler (g++). On a GPU the eager steps are fast enough: call it on CPU."""
        self._lone_phone = torch.compile(self._phone_step, dynamic=False)
        self._lone_frames = torch.compile(self._frame_step, dynamic=False)
        # a fresh stream, spoken to its end: both graphs, from a fresh state and from the state
        # a step leaves, are compiled now rather than in a call
        with torch.no_grad():
            self.synthesize("Compiling, one two.")

    @property
    def compiled(self) -> bool:
        return self._lone_frames is not None

    def _phone_step(self, windows: torch.Tensor, masks: torch.Tensor,
                    tensors: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """The pure core of ``speak_phones`` (what ``compile_steps`` compiles): token windows
        (b, 2*lookahead+1, 3) and masks and the encoder state's tensors (advanced in place) ->
        (phone encodings (b, d), log durations (b,))."""
        la = self.model.config.lookahead
        local = self.model.encode_local(windows, masks)[:, la]
        enc, _ = self.model.enc_stack.step(local, StackState(tensors), branch_free=True)
        return enc, self.model.durations(enc[:, None])[:, 0]

    def _frame_step(self, x: torch.Tensor, tensors: dict[str, torch.Tensor]) -> torch.Tensor:
        """The pure core of ``decode_groups``: frame inputs (b, r, d) and the decoder state's
        tensors (advanced in place) -> vocoder features (b, r, N_FEATURES)."""
        return self.model.denormalize(self.model.step_frames(x, StackState(tensors),
                                                             branch_free=True))

    def open_stream(self, *, seed: int = 0, chunk_frames: int = DEFAULT_CHUNK_FRAMES,
                    pace: float = 1.0, question_rise_st: float = QUESTION_RISE_ST,
                    postfilter: float | None = None) -> TTSStream:
        """A new utterance. ``postfilter``: the vocoder's envelope deepening (None: the voice's
        own, ``postfilter`` in its config.json; 0: the envelopes as the model predicts them)."""
        return TTSStream(self, seed=seed, chunk_frames=chunk_frames, pace=pace,
                         question_rise_st=question_rise_st,
                         postfilter=self.postfilter if postfilter is None else postfilter)

    @property
    def postfilter(self) -> float:
        """The vocoder's envelope deepening this voice speaks with (its config's)."""
        return self.model.config.postfilter

    def synthesize(self, text: str, *, seed: int = 0, pace: float = 1.0,
                   question_rise_st: float = QUESTION_RISE_ST,
                   postfilter: float | None = None) -> Synthesis:
        """The whole utterance at once (the streaming path run to the end)."""
        stream = self.open_stream(seed=seed, pace=pace, question_rise_st=question_rise_st,
                                  postfilter=postfilter)
        stream.push_text(text)
        stream.end_text()
        if stream.n_tokens == 0:
            raise TextError(f"nothing to say in {text[:60]!r}: no words after normalisation")
        chunks = stream.pull()
        pcm = np.concatenate([c.pcm for c in chunks]) if chunks else np.zeros(0, np.float32)
        words = tuple(w for c in chunks for w in c.words)
        return Synthesis(pcm, words)

    def pull_many(self, streams: Sequence[TTSStream], *,
                  max_chunks: int | None = None) -> list[list[AudioChunk]]:
        """``[s.pull() for s in streams]`` (at most ``max_chunks`` chunks each when given), with
        the model work of all the streams batched: each round takes every stream as far as it
        goes without the model, then runs ONE encoder step for every stream with a phone to
        speak and ONE decoder step for every stream with a group of frames to decode. The same
        samples as pulling each stream alone, float rounding aside. A stream given twice is
        pulled once; every stream must belong to this voice.

            first = voice.pull_many(streams, max_chunks=1)   # the next 20 ms of every stream
        """
        if max_chunks is not None and max_chunks < 1:
            raise TTSError(f"max_chunks must be >= 1 or None, got {max_chunks}")
        for s in streams:
            if s._voice is not self:
                raise TTSError("pull_many: a stream of another voice")
        out: dict[int, list[AudioChunk]] = {id(s): [] for s in streams}
        todo = list({id(s): s for s in streams}.values())
        while todo:
            phones: list[TTSStream] = []
            groups: list[tuple[TTSStream, int]] = []
            for s in todo:
                got = out[id(s)]
                while max_chunks is None or len(got) < max_chunks:
                    item = s._advance()
                    if item is None:
                        break
                    if isinstance(item, AudioChunk):
                        got.append(item)
                    elif item is PHONE:
                        phones.append(s)
                        break
                    else:
                        groups.append((s, item))
                        break
            if phones:   # phones first, so that their frames join this round's decoder step
                self.speak_phones(phones)
                todo = phones + [s for s, _ in groups]   # asking again changes nothing
                continue
            if groups:
                self.decode_groups(groups)
            todo = [s for s, _ in groups]
        return [list(out[id(s)]) for s in streams]

    def speak_phones(self, streams: Sequence[TTSStream]) -> None:
        """One encoder step for the next phone of each of ``streams`` (their ``_advance`` said
        ``PHONE``): look-ahead convolutions, the phone-level SSM step on the streams' encoder
        states concatenated, the durations; each stream then queues its phone's frames."""
        la = self.model.config.lookahead
        streams = sorted(streams, key=id)
        windows, masks = zip(*(s._phone_window() for s in streams), strict=True)
        with self.lock, torch.no_grad():
            tokens = torch.from_numpy(np.stack(windows)).to(self.device)
            mask = torch.from_numpy(np.stack(masks)).to(self.device)
            if self._lone_phone is not None and len(streams) == 1:
                state = _lone_state(streams[0], "_enc_state")
                enc, log_dur = self._lone_phone(tokens, mask, state.tensors)
            else:
                local = self.model.encode_local(tokens, mask)[:, la]                # (b, d)
                state = self._batched(streams, "_enc_state")
                enc, _ = self.model.enc_stack.step(local, state)        # state advances in place
                log_dur = self.model.durations(enc[:, None])[:, 0]
            log_durs = log_dur.tolist()
            for k, s in enumerate(streams):
                s._phone_spoken(enc[k:k + 1], log_durs[k])

    def _batched(self, streams: Sequence[TTSStream], attr: str) -> StackState:
        """The states ``attr`` of ``streams`` as one batch, each stream's state then a row (a
        view) of it. A batch of the very streams of the previous step of this kind, in the same
        order, is that step's batch itself: no copy."""
        if len(streams) == 1:
            return getattr(streams[0], attr)
        key = [id(s) for s in streams]      # callers order streams by id: a stable batch
        last = self._last_batch.get(attr)
        if (last is not None and last[0] == key
                and all(getattr(s, attr) is row for s, row in zip(streams, last[2], strict=True))):
            return last[1]
        state = StackState.cat([getattr(s, attr) for s in streams])
        rows = [state.select(slice(k, k + 1)) for k in range(len(streams))]
        for s, row in zip(streams, rows, strict=True):
            setattr(s, attr, row)
        self._last_batch[attr] = (key, state, rows)
        return state

    def decode_groups(self, groups: Sequence[tuple[TTSStream, int]]) -> None:
        """One decoder step for all ``(stream, n)``: each stream's next ``n`` <= r queued frames
        (its ``_advance`` asked for them), the streams' decoder states concatenated into one
        batch (``_batched``), the outputs split back to each stream's vocoder."""
        groups = sorted(groups, key=lambda g: id(g[0]))
        x = torch.stack([s._take_group(n) for s, n in groups])         # (b, r, d)
        with self.lock, torch.no_grad():
            if self._lone_frames is not None and len(groups) == 1:
                state = _lone_state(groups[0][0], "_dec_state")
                feats = self._lone_frames(x, state.tensors).cpu().numpy()
            else:
                state = self._batched([s for s, _ in groups], "_dec_state")
                out = self.model.step_frames(x, state)                 # state advances in place
                feats = self.model.denormalize(out).cpu().numpy()       # (b, r, N_FEATURES)
        # every stream's frames through its vocoder in one vectorised call per setting (the
        # streams of one voice share theirs; a caller's own postfilter makes a second group)
        by_setting: dict[tuple, list[int]] = {}
        for k, (s, _) in enumerate(groups):
            v = s._vocoder
            by_setting.setdefault((v._postfilter, v._fractional, v._postfilter_from), []).append(k)
        for ks in by_setting.values():
            inputs = [groups[k][0]._vocoder_input(feats[k, :groups[k][1]]) for k in ks]
            pcms = vocode_streams([groups[k][0]._vocoder for k in ks], inputs)
            for k, pcm in zip(ks, pcms, strict=True):
                groups[k][0]._add_pcm(pcm)


def _lone_state(stream: TTSStream, attr: str) -> StackState:
    """``stream``'s state ``attr`` for a compiled step: its own tensors when contiguous (a fresh
    state, or a row of a batch it stepped in), else a contiguous copy that becomes the stream's.
    The compiled graph is specialised to its inputs' strides: other strides would make
    torch.compile recompile (seconds) in the middle of a call."""
    state: StackState = getattr(stream, attr)
    if all(t.is_contiguous() for t in state.tensors.values()):
        return state
    state = StackState({k: v.contiguous() for k, v in state.tensors.items()})
    setattr(stream, attr, state)
    return state


class TTSStream:
    """One utterance (or one agent turn) being spoken. Not thread-safe on its own: call it from
    one thread at a time (the voice's lock serialises the model)."""

    def __init__(self, voice: TTSVoice, *, seed: int, chunk_frames: int, pace: float = 1.0,
                 question_rise_st: float = QUESTION_RISE_ST, postfilter: float = 0.0) -> None:
        from .phonemes import IncrementalPhonemizer

        if chunk_frames < 1:
            raise TTSError(f"chunk_frames must be >= 1, got {chunk_frames}")
        if not 0.5 <= pace <= 2.0:
            raise TTSError(f"pace must be within 0.5..2.0 (1.0: the voice's own), got {pace}")
        if not 0.0 <= question_rise_st <= 12.0:
            raise TTSError(f"question_rise_st must be within 0..12 semitones, got {question_rise_st}")
        self._pace = pace                   # predicted phone durations times this
        self._rise = question_rise_st * np.log(2.0) / 12.0   # in log f0
        self._offsets: list[float] = []     # each queued frame's log f0 offset (questions rise)
        self._taken_offsets: list[float] = []
        self._last_offset = 0.0
        self._clause_start = True           # the next word starts a clause (and maybe a sentence)
        self._sentence_start = True
        self._sentence_asks = False         # this sentence starts with an auxiliary
        self._clause_asks = False           # this clause does
        self._voice = voice
        self._model = voice.model
        self._phonemizer = IncrementalPhonemizer()
        self._tokens: list = []             # PhoneTokens not yet dropped from the window
        self._encoded: list[np.ndarray] = []
        self._offset = 0                    # index of self._tokens[0] in the utterance
        self._next = 0                      # next phone to speak (utterance index)
        self._ended = False
        self._cancelled = False
        self._enc_state: StackState = self._model.enc_stack.init_state(1)
        self._dec_state: StackState = self._model.init_frame_state(1)
        self._vocoder = StreamingVocoder(seed, postfilter=postfilter,   # checks the amount
                                         fractional=voice.model.config.fractional_pulses,
                                         postfilter_from=voice.model.config.postfilter_from)
        self._chunk_samples = chunk_frames * HOP_SAMPLES
        self._pending = np.zeros(0, np.float32)
        self._pending_words: list[tuple[str, float]] = []
        self._queue: list[torch.Tensor] = []  # per-frame decoder inputs not yet decoded
        self._samples_out = 0               # samples already returned in chunks
        self._frames_made = 0
        self._lookahead = self._model.config.lookahead

    # -- input ----------------------------------------------------------------------------------
    def push_text(self, fragment: str) -> None:
        if self._cancelled:   # text still streaming in after a barge-in: dropped, not an error
            return
        if self._ended:
            raise TTSError("push_text after end_text: open a new stream for a new utterance")
        self._add(self._phonemizer.push(fragment))

    def end_text(self) -> None:
        if self._ended:
            return
        if not self._cancelled:
            self._add(self._phonemizer.flush())
        self._ended = True

    def cancel(self) -> None:
        """Barge-in: nothing more comes out of this stream."""
        self._cancelled = True
        self._ended = True
        self._pending = np.zeros(0, np.float32)
        self._tokens.clear()
        self._queue.clear()
        self._offsets.clear()

    @property
    def n_tokens(self) -> int:
        """Phone tokens received so far (0 after a text with nothing to say: empty stream)."""
        return self._offset + len(self._tokens)

    def _add(self, tokens: list) -> None:
        for tok in tokens:
            self._tokens.append(tok)
            self._encoded.append(_encode_one(tok))

    # -- output ---------------------------------------------------------------------------------
    @property
    def done(self) -> bool:
        """True once the text has ended and every sample has been pulled (or after cancel)."""
        return self._cancelled or (self._text_done() and not self._queue
                                   and self._pending.size == 0)

    @property
    def spoken_s(self) -> float:
        """Seconds of audio handed out so far."""
        return self._samples_out / SAMPLE_RATE_HZ

    def pull(self) -> list[AudioChunk]:
        """Synthesise every phone that can be spoken now; return the finished chunks."""
        return list(self.iter_pull())

    def iter_pull(self) -> Iterator[AudioChunk]:
        """Like ``pull`` but yields each chunk as soon as it exists (lowest first-audio time)."""
        while (item := self._advance()) is not None:
            if isinstance(item, AudioChunk):
                yield item
            elif item is PHONE:
                self._voice.speak_phones([self])
            else:
                self._voice.decode_groups([(self, item)])

    def _advance(self) -> AudioChunk | int | _Phone | None:
        """What this stream needs next: a finished chunk (taken), ``PHONE`` (its next phone can
        be spoken: ``TTSVoice.speak_phones``), the number of queued frames its next decoder step
        takes (an ``int``: ``TTSVoice.decode_groups``), or None (nothing more until more text
        arrives, or the stream is done). The caller runs the model work, alone or batched with
        other streams' work."""
        r = self._model.config.frames_per_step
        while not self._cancelled:
            if self._pending.size >= self._chunk_samples:
                return self._take(self._chunk_samples)
            if len(self._queue) >= r:
                return r
            if self._ready(self._next):
                return PHONE
            if self._text_done() and self._queue:
                return len(self._queue)             # the last, partial group
            break
        if not self._cancelled and self._text_done() and self._pending.size:
            return self._take(self._pending.size)
        return None

    def _text_done(self) -> bool:
        return self._ended and self._next >= self._offset + len(self._tokens)

    def _take_group(self, n: int) -> torch.Tensor:
        """The decoder input (r, d) of the next ``n`` <= r queued frames (zero inputs pad a last
        partial group); they leave the queue."""
        r = self._model.config.frames_per_step
        frames = self._queue[:n]
        del self._queue[:n]
        self._taken_offsets = self._offsets[:n]
        del self._offsets[:n]
        return torch.stack(frames + [torch.zeros_like(frames[0])] * (r - n))

    def _vocoder_input(self, feats: np.ndarray) -> np.ndarray:
        """The decoded frames with the pitch offsets of the phones they belong to."""
        offsets, self._taken_offsets = self._taken_offsets, []
        if any(offsets):
            feats = feats.copy()
            feats[: len(offsets), LF0] += np.asarray(offsets, dtype=feats.dtype)
        return feats

    def _add_pcm(self, pcm: np.ndarray) -> None:
        self._pending = np.concatenate([self._pending, pcm.astype(np.float32)])

    def _take(self, n: int) -> AudioChunk:
        pcm, self._pending = self._pending[:n], self._pending[n:]
        start_s = self._samples_out / SAMPLE_RATE_HZ
        end_s = (self._samples_out + n) / SAMPLE_RATE_HZ
        words = tuple(w for w in self._pending_words if w[1] < end_s)
        self._pending_words = [w for w in self._pending_words if w[1] >= end_s]
        self._samples_out += n
        return AudioChunk(np.clip(pcm, -1.0, 1.0).astype(np.float32), start_s, words)

    def _ready(self, i: int) -> bool:
        known = self._offset + len(self._tokens)
        return i < known and (self._ended or i + self._lookahead < known)

    def _phone_window(self) -> tuple[np.ndarray, np.ndarray]:
        """The encoder's input for the next phone: token window (2 * la + 1, 3) and its mask."""
        i, la = self._next, self._lookahead
        window = np.zeros((2 * la + 1, 3), np.int64)
        mask = np.zeros(2 * la + 1, bool)
        known = self._offset + len(self._tokens)
        for j in range(i - la, i + la + 1):
            if self._offset <= j < known:
                window[j - i + la] = self._encoded[j - self._offset]
                mask[j - i + la] = True
        return window, mask

    def _phone_spoken(self, enc: torch.Tensor, log_dur: float) -> None:
        """The next phone's encoding ``enc`` (1, d) and predicted log(1 + frames): queue its
        frames' decoder inputs, note its word, move on (call under the voice's lock)."""
        tok = self._tokens[self._next - self._offset]
        frames = int(round(np.expm1(max(log_dur, 0.0)) * self._pace))
        frames = min(MAX_PHONE_FRAMES, max(0 if tok.symbol in PAUSE_SYMBOLS else 1, frames))
        target = self._rise_target(tok)
        if frames:
            pos = frame_position(torch.arange(frames, device=enc.device),
                                 torch.full((frames,), frames, device=enc.device))
            self._queue.extend(self._model.frame_inputs(enc.expand(frames, -1), pos).unbind(0))
            start = self._last_offset
            self._offsets.extend(start + (target - start) * (k + 1) / frames for k in range(frames))
        self._last_offset = target
        if tok.word is not None and tok.position in (0, 1):
            self._pending_words.append((tok.word, self._frames_made * HOP_SAMPLES / SAMPLE_RATE_HZ))
        self._frames_made += frames
        self._next += 1
        # keep only the window the next phones still need
        drop = self._next - self._lookahead - self._offset
        if drop > 0:
            del self._tokens[:drop]
            del self._encoded[:drop]
            self._offset += drop


    def _rise_target(self, tok) -> float:
        """The log f0 offset at the end of the phone being spoken (``tok``, utterance index
        ``self._next``): a yes/no question's phones within the look-ahead of its "?" ramp up to
        the full rise on the last one; everything else 0. Reads only the tokens the phone's own
        encoding saw (up to ``lookahead`` ahead), so how the text was pushed changes nothing."""
        if tok.symbol in PAUSE_SYMBOLS:
            self._clause_start = True
            self._sentence_start = self._sentence_start or tok.symbol != "pau"
            return 0.0
        if self._clause_start and tok.word is not None:
            word = tok.word.lower()
            if word in _LEAD_INS:       # "and is it ...?": the next word decides
                return 0.0
            asks = word in AUXILIARIES
            self._clause_asks = asks
            if self._sentence_start:
                self._sentence_asks = asks
            self._clause_start = self._sentence_start = False
        if not self._rise or not (self._sentence_asks or self._clause_asks):
            return 0.0
        i, la = self._next, self._lookahead
        known = self._offset + len(self._tokens)
        for k in range(1, la + 1):
            if i + k >= known:
                return 0.0
            ahead = self._tokens[i + k - self._offset]
            if ahead.symbol in PAUSE_SYMBOLS:
                return self._rise * (la + 1 - k) / la if ahead.symbol == "qend" else 0.0
        return 0.0


def _encode_one(tok) -> np.ndarray:
    from .phonemes import encode

    return encode([tok])[0]
