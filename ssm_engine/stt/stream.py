"""RecognizerStream: one utterance of one caller, stepped on a shared BatchRunner.

    runner = BatchRunner(model); runner.start()
    rs = RecognizerStream(runner, model.config)        # opens a stream on the runner
    fut = rs.push(samples)                             # 8 kHz int16/float; None if < 20 ms queued
    if fut is not None and rs.take(fut.result()):      # (await asyncio.wrap_future(fut) in asyncio)
        print("partial:", rs.text)
    rs.take(rs.finish().result())                      # pads with flush_s of silence, closes
    print("final:", rs.text)

The stream keeps the samples that do not fill a whole 20 ms step until the next push. Results
must be taken in the order the futures were made (the runner runs them in that order anyway).
With ``stride=k`` a push runs the model only once k steps (k x 20 ms) are queued, and then on a
multiple of k: partials come every k x 20 ms, and each run is one k-frame ``prefill``, several
times cheaper a frame than k single steps (and compiled, see ``STTModel.compile_prefill``).
The transcript is the same: only when the frames are computed changes.

Decoding: partials (``text`` while the stream is open) are greedy CTC. Given a ``beam``
(``CTCBeamSearch``: lexicon + word LM), every frame taken also advances a prefix beam search,
and once the stream is finished and its last result taken, ``text`` is the beam's final
transcript (``final_text``); without one the greedy transcript is the final one too. A model with
a phone head returns the phones' log-probs after the characters' in each row: partials read the
characters, a ``PhoneBeamSearch`` the phones, a ``JointSearch`` both.
"""

from __future__ import annotations

from concurrent.futures import Future

import numpy as np
import torch

from ..errors import ConfigError
from ..runner import StreamRunner
from .beam import CTCBeamSearch
from .decode import StreamingGreedyDecoder
from .errors import AudioInputError
from .hints import NO_HINTS, Hints, Recognition
from .joint import JointDecoder, JointSearch
from .encoder_model import WhisperSTTConfig
from .model import STTConfig
from .phone_beam import PhoneBeamSearch

__all__ = ["RecognizerStream", "as_float", "beam_columns", "decode_utterance", "search_result"]


def as_float(samples: np.ndarray | bytes) -> np.ndarray:
    """int16 PCM (array or bytes) or float samples -> float32 in [-1, 1]; rejects NaN/inf."""
    if isinstance(samples, (bytes, bytearray, memoryview)):
        if len(samples) % 2:
            raise AudioInputError(f"16-bit PCM needs an even byte count, got {len(samples)}")
        samples = np.frombuffer(samples, dtype="<i2")
    x = np.asarray(samples)
    if x.ndim != 1:
        raise AudioInputError(f"expected mono samples (1-D), got shape {x.shape}")
    if x.dtype == np.int16:
        return x.astype(np.float32) / 32768.0
    x = x.astype(np.float32)
    if not np.isfinite(x).all():
        raise AudioInputError("audio holds NaN or infinite samples")
    return x


def beam_columns(beam: CTCBeamSearch | PhoneBeamSearch | JointSearch | None,
                 config: STTConfig | WhisperSTTConfig) -> slice:
    """The columns of a model's output rows ``beam`` searches: the characters' (a character
    beam), the phones' (a phone beam) or both (the joint search)."""
    chars = slice(0, config.vocab_size)
    if isinstance(beam, (PhoneBeamSearch, JointSearch)):
        if not config.phone_vocab_size:
            raise ConfigError(f"{type(beam).__name__} needs a model with a phone head")
        first = config.vocab_size if isinstance(beam, PhoneBeamSearch) else 0
        return slice(first, config.vocab_size + config.phone_vocab_size)
    return chars


def search_result(beam, greedy_text: str) -> Recognition:
    """The final of a finished search (a stream of a beam, or None: the greedy text)."""
    if isinstance(beam, JointDecoder):
        return beam.result()
    return Recognition(beam.finalize() if beam is not None else greedy_text, None)


def decode_utterance(log_probs: torch.Tensor, config: STTConfig | WhisperSTTConfig, *,
                     beam: CTCBeamSearch | PhoneBeamSearch | JointSearch | None = None,
                     hints: Hints = NO_HINTS) -> Recognition:
    """A whole utterance's log-probs (n, out_size) -> its final, decoded as a stream's last
    result is (the same beam, hints and columns): a final pass over an utterance at its end."""
    greedy = StreamingGreedyDecoder()
    greedy.push(log_probs[:, : config.vocab_size])
    search = (beam.stream(hints) if isinstance(beam, JointSearch)
              else beam.stream() if beam is not None else None)
    if search is not None:
        search.push(log_probs[:, beam_columns(beam, config)])
    return search_result(search, greedy.text)


class RecognizerStream:
    """See the module docstring. Not thread-safe: one owner (an asyncio task, a loop)."""

    def __init__(self, runner: StreamRunner, config: STTConfig | WhisperSTTConfig, *, flush_s: float = 0.2,
                 beam: CTCBeamSearch | PhoneBeamSearch | JointSearch | None = None,
                 stride: int = 1, hints: Hints = NO_HINTS) -> None:
        if isinstance(stride, bool) or not isinstance(stride, int) or stride < 1:
            raise AudioInputError(f"stride must be a positive number of steps, got {stride!r}")
        self._runner = runner
        self._step = config.step_samples
        self._stride = stride
        self._block = getattr(config, "hop_frames", 1)
        if stride % self._block:
            raise ConfigError(f"stride {stride} is not a multiple of the model's hop "
                              f"({self._block} steps)")
        self._flush_steps = max(1, round(flush_s * config.frame_rate_hz))
        self._rest = np.zeros(0, np.float32)
        self._sid: int | None = runner.open_stream()
        self.decoder = StreamingGreedyDecoder()
        # hints bias the joint search's final (hints.py); the one-head searches ignore them
        self.beam = (beam.stream(hints) if isinstance(beam, JointSearch)
                     else beam.stream() if beam is not None else None)
        self._chars = slice(0, config.vocab_size)
        self._beam_cols = beam_columns(beam, config)
        self.samples_in = 0
        self._submitted = self._taken = 0
        self.final_text: str | None = None
        """The final transcript, set when the last result after ``finish()`` is taken."""
        self.recognition: Recognition | None = None
        """The final with its confidence and alternatives (set with ``final_text``)."""

    @property
    def text(self) -> str:
        """The final transcript once there is one, else the greedy partial."""
        return self.final_text if self.final_text is not None else self.decoder.text

    @property
    def closed(self) -> bool:
        return self._sid is None

    def push(self, samples: np.ndarray | bytes) -> Future | None:
        """Queue audio at the model's rate. -> Future of (n, V) log-probs, or None (less than
        ``stride`` steps queued)."""
        if self._sid is None:
            raise AudioInputError("push() after finish(): this stream is closed")
        x = as_float(samples)
        self.samples_in += x.size
        buf = np.concatenate([self._rest, x]) if self._rest.size else x
        n = buf.size // (self._step * self._stride) * self._stride
        self._rest = buf[n * self._step:].copy()
        if n == 0:
            return None
        frames = torch.from_numpy(np.ascontiguousarray(buf[: n * self._step])).view(n, self._step)
        self._submitted += 1
        return self._runner.submit(self._sid, frames)

    def finish(self) -> Future:
        """Queue the leftover samples and ``flush_s`` of silence, then close the stream.
        -> Future of the last (n, V) log-probs."""
        if self._sid is None:
            raise AudioInputError("finish() called twice")
        n = (self._rest.size + self._flush_steps * self._step + self._step - 1) // self._step
        n = -(-n // self._block) * self._block           # a model that steps whole hops
        tail = np.zeros(n * self._step, np.float32)        # the rest (< stride steps), then silence
        tail[: self._rest.size] = self._rest
        frames = torch.from_numpy(tail).view(n, self._step)
        fut = self._runner.submit(self._sid, frames)
        self._submitted += 1
        self._runner.close_stream(self._sid)
        self._sid = None
        self._rest = np.zeros(0, np.float32)
        return fut

    def take(self, log_probs: torch.Tensor) -> bool:
        """Decode results of a push/finish, in order. True when the transcript changed (the
        greedy partial grew, or the final transcript was made)."""
        changed = self.decoder.push(log_probs[:, self._chars])
        if self.beam is not None:
            self.beam.push(log_probs[:, self._beam_cols])
        self._taken += 1
        if self._sid is None and self._taken == self._submitted and self.final_text is None:
            self.recognition = search_result(self.beam, self.decoder.text)
            self.final_text = self.recognition.text
            changed = True
        return changed

    def abort(self) -> None:
        """Close without decoding the rest (e.g. cancelled call)."""
        if self._sid is not None:
            self._runner.close_stream(self._sid)
            self._sid = None
