"""parley's streaming SSM recogniser as an engine: one loaded model per process, every utterance
stepped together, finals decoded as the frames come (its pipecat service: ``services.ssm_stt``).

    engine = SSMSTTEngine.shared(DEFAULT_MODEL_DIR, "beam", compile=True, runner="process")
    utt = engine.open(8000, hints)          # one per utterance
    fut = utt.push(pcm)                     # a Future of the model's log-probs, or None
    await utt.take_async(fut)               # the greedy partial grows: utt.text
    for fut in utt.finish(): await utt.take_async(fut)
    utt.recognition()                       # the final (beam search), its confidence

Model steps never run on the event loop: every call of the process shares one ``SSMSTTEngine``
per model directory, whose ``BatchRunner`` thread steps all open utterances together; callers
await the runner's futures. Each utterance runs the model every ``stride`` 20 ms steps (5 by
default: partials every 100 ms), as one k-frame prefill, which ``torch.compile`` makes ~3x cheaper
for a lone stream (``compile=True``; ~30 s of compiling when the engine starts cold, a few
seconds from inductor's cache). 16 kHz input is resampled to the model's 8 kHz with a streaming
soxr resampler per utterance.

Decoding: interim transcripts are greedy CTC. The final one comes from a CTC prefix beam search
with the word lexicon and trigram LM shipped beside the model (``models/stt/lm.arpa.gz``, see
``ssm_engine.stt.beam``), advanced frame by frame while the caller speaks, so at the end only
the flush frames and the sentence end remain. It runs on the event loop as each result arrives:
0.14 ms a frame on average (1.5 ms the worst seen), less than handing it to a thread costs
(``benchmarks/bench_vad_dispatch.py`` measures such a hand-off at ~0.27 ms of CPU a frame, and
waits of 5 ms p50 under 16 calls). ``decoder="greedy"`` turns it off.

The final pass: a model folder with a ``final/`` model beside it (a recogniser trained on whole
utterances, ``WhisperSTTConfig.features == "utterance"``) decodes each utterance's final from
Whisper's encoding of the whole utterance at its end (one encoder pass over it, in the engine's
final-pass workers: processes of their own with ``runner="process"`` (``final_procs``;
up to ``FINAL_PROCS`` of them, an utterance's pieces in one, each early final in the least busy), else a
thread) instead of the stream's sliding windows, which hear less of the utterance
around each frame; the stream then only makes the greedy partials (no beam search on the event
loop). A long utterance is encoded in pieces while the caller speaks (every ``utterance_final.FINAL_PIECE_S``,
cut at the quietest 20 ms of the last ``FINAL_CUT_SEARCH_S``, the SSM and the beam carried on
from piece to piece), so that at its end only the last piece is left: the final's wait stays
bounded however long the caller talks. Who makes the final: the final folder's
``decoder.json`` (``whisper_final``): Whisper tiny.en's own decoder over the utterance encoded
with two seconds of silence (the shipped default: it reads recorded people as Whisper itself
does), or the final model's CTC heads and the beam search (``final_decoder="ctc"``; beside
Whisper's on turns that spell a name or spot keywords). Whisper's decoder reads a long
utterance in blocks of up to ``whisper_final.CHUNK_S`` (18 s), so its final waits for the last
block's encoding and decoding. Early finals (on: ``utterance_final.SPECULATE_MAX``): where the VAD's stop timer
starts (``RecognizerUtterance.pause``, the pipeline's ``SpeechPauseFrame``), and once 100 ms of
quiet (under ``QUIET_RATIO`` of the utterance's loudest) follow speech, the utterance so far is
decoded at once, while the timer runs, and is the final if the stop follows; the stream's flush
is then not waited for (should that final fail, the stream's partial stands), so the final is
there as the turn ends, or as soon as its decode is (``utterance_final.FinalPass``).

A runner in a worker process (``runner="process"``, ``parley serve --stt-procs``) may die; it is
restarted, and an utterance whose stream it took with it waits for the replacement (up to
``RECOVER_TIMEOUT_S``) and replays its audio so far (up to ``REPLAY_MAX_S``) into a new stream
(``RecognizerUtterance.recover``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import itertools
import json
import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
import soxr
import torch

from pipeline.cores import usable_cores
from pipeline.engines.final_procs import FinalPassProcess
from pipeline.engines.stt_loading import beam_search as _beam_search, load_final_model, search_weights
from pipeline.engines.utterance_final import FinalPass
from pipeline.engines.whisper_final import WhisperFinal, final_decoder_choice, shared_whisper_final
from pipeline.engines.runner_procs import RunnerProcess
from pipeline.errors import AudioFormatError, EngineUnavailableError, PipelineError
from pipeline.options import SttDecoder, SttRunner
from ssm_engine import BatchRunner, SSMEngineError
from ssm_engine.batcher import DEFAULT_PREFILL_MIN
from ssm_engine.device import resolve_device
from ssm_engine.errors import RunnerClosedError
from ssm_engine.stt.beam import BeamConfig, CTCBeamSearch
from ssm_engine.stt.errors import AudioInputError
from ssm_engine.stt.hints import NO_HINTS, Hints, Recognition
from ssm_engine.stt.encoder_model import WhisperSTTModel
from ssm_engine.stt.model import STTModel
from ssm_engine.stt.recognizers import load_recognizer
from ssm_engine.stt.joint import JointSearch
from ssm_engine.stt.phone_beam import PhoneBeamSearch
from ssm_engine.runner import StreamRunner
from ssm_engine.stt.stream import (RecognizerStream, as_float)

if TYPE_CHECKING:
    from pipeline.engines.remote_recognizer import RemoteRecognizerEngine, RemoteRecognizerUtterance

__all__ = ["DEFAULT_COMPILE", "DEFAULT_DECODER", "DEFAULT_MODEL_DIR", "DEFAULT_STRIDE", "FINAL_DIR", "LM_FILE",
           "LEXICON_FILE", "Decoder", "Runner", "SSMSTTEngine", "RecognizerUtterance", "SUPPORTED_RATES_HZ",
           "SSMRecognizerBackend"]

logger = logging.getLogger(__name__)

DEFAULT_MODEL_DIR = Path(__file__).resolve().parents[2] / "models" / "stt"
LM_FILE = "lm.arpa.gz"
FINAL_DIR = "final"
"""The final-pass model's folder inside a recogniser's folder (the module docstring)."""
LEXICON_FILE = "lexicon.dict.gz"
"""Pronunciations of the LM's words, beside a model with a phone head (``ssm_engine.stt.phones``).
"""
SUPPORTED_RATES_HZ = (8000, 16000)
FINAL_PROCS = 2
"""Final-pass worker processes an engine with ``runner="process"`` starts, one a usable core
(``pipeline.cores.usable_cores``) up to this: many calls' early finals come in bursts (callers
end their turns together), and two workers halve the wait behind another call's decode where a
second core is there (``benchmarks/bench_capacity.py``)."""
REPLAY_MAX_S = 60.0        # an utterance's audio kept for a replay onto a restarted runner
RECOVER_TIMEOUT_S = 20.0   # how long a lost utterance waits for its runner to come back
RECOVER_POLL_S = 0.2
Decoder = SttDecoder
"""How finals are decoded (``pipeline.options.SttDecoder``)."""
DEFAULT_STRIDE = 5
"""20 ms steps per model run of an utterance (partials every 100 ms); 1 runs every frame."""
DEFAULT_COMPILE = False
"""Engines run their k-frame prefill eagerly unless asked to compile it (``compile=True``, about a
third of the CPU for a lone stream, ~30 s at the first start): ``parley serve`` and ``parley eval
stt`` ask by default (``PipelineConfig.stt_compile``, ``--stt-compile``, ``--compile``)."""
DEFAULT_DECODER: Decoder = "beam"
"""How services decode finals unless told otherwise (``PipelineConfig.stt_decoder``)."""
Runner = SttRunner
"""Where an engine steps the model (``pipeline.options.SttRunner``)."""


class RecognizerUtterance:
    """One utterance at the caller's rate: resamples to the model's rate, feeds a stream."""

    def __init__(self, engine: SSMSTTEngine, sample_rate_hz: int,
                 hints: Hints = NO_HINTS) -> None:
        model_rate = engine.model.config.sample_rate_hz
        self._resampler = (soxr.ResampleStream(sample_rate_hz, model_rate, 1, dtype="float32",
                                               quality="HQ")
                           if sample_rate_hz != model_rate else None)
        self._engine, self._hints = engine, hints
        self._stream: RecognizerStream | None
        try:
            self._stream = self._new_stream()
        except SSMEngineError:   # the runner is restarting: the audio waits, the first push after
            self._stream = None  # it is back opens the stream and replays it (push)
        # the utterance's audio at the model's rate, for a replay onto a restarted runner
        self._heard: list[np.ndarray] = []
        self._heard_samples = 0
        self._max_replay_samples = int(REPLAY_MAX_S * model_rate)
        self.replays = 0
        self._final: Recognition | None = None      # the final pass's, once taken
        self._final_pass = FinalPass(engine, hints, self._heard) if engine.has_final_pass else None

    @property
    def final_pass(self) -> bool:
        """True when this utterance's final comes from the engine's final pass."""
        return self._engine.has_final_pass

    def _new_stream(self) -> RecognizerStream:
        e = self._engine
        beam = None if e.has_final_pass else e.beam   # the final pass searches instead
        return RecognizerStream(e.runner, e.model.config, flush_s=e.flush_s, beam=beam, stride=e.stride,
                                hints=self._hints)

    def _keep(self, x: np.ndarray) -> None:
        self._heard_samples += x.size
        if self._heard_samples <= self._max_replay_samples:
            self._heard.append(x)
        if self._final_pass is not None:   # after: an early final reads ``_heard`` with ``x`` in it
            self._final_pass.add(x)

    def _reopen(self) -> Future | None:
        """A new stream, if the runner takes one, with everything heard so far pushed into it.
        -> that push's future; None with no stream (the runner is still down) or nothing heard."""
        if self._heard_samples > self._max_replay_samples:
            raise SSMEngineError(f"the utterance is over {REPLAY_MAX_S:.0f} s: not replayed")
        try:
            self._stream = self._new_stream()
        except SSMEngineError:
            self._stream = None
            return None
        self.replays += 1
        return self._stream.push(np.concatenate(self._heard)) if self._heard else None

    async def recover(self, timeout_s: float = RECOVER_TIMEOUT_S) -> float:
        """The runner lost this utterance's stream (its process died and is restarting): open a
        new stream once the runner takes one, and replay the utterance's audio so far into it.
        -> the seconds replayed. Raises SSMEngineError when the runner is not back within
        ``timeout_s`` or the utterance is too long to replay (over ``REPLAY_MAX_S``)."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fut = self._reopen()
                if self._stream is not None:
                    if fut is not None:
                        self._stream.take(await asyncio.wrap_future(fut))
                    return self._heard_samples / self._engine.model.config.sample_rate_hz
            except SSMEngineError:
                if self._heard_samples > self._max_replay_samples or time.monotonic() > deadline:
                    raise
                self._stream = None          # it died again under the replay: wait, then again
            if time.monotonic() > deadline:
                raise RunnerClosedError(f"the recogniser was not back within {timeout_s:.0f} s")
            await asyncio.sleep(RECOVER_POLL_S)

    @property
    def text(self) -> str:
        """Greedy partial while open; the final transcript once ``finish``'s results are taken."""
        if self._final is not None:
            return self._final.text
        return self._stream.text if self._stream is not None else ""

    @property
    def recognition(self) -> Recognition | None:
        """The final with its confidence and alternatives, once there is one."""
        if self._final is not None:
            return self._final
        return self._stream.recognition if self._stream is not None else None

    def push(self, pcm: bytes | np.ndarray) -> Future | None:
        """int16 PCM at the utterance's rate. -> Future of log-probs (or None, nothing to run)."""
        try:
            x = as_float(pcm)      # int16 or float, mono, finite (AudioInputError below)
            if self._resampler is not None:
                x = self._resampler.resample_chunk(x)
            if not x.size:
                return None
            self._keep(x)      # before the push: a push that fails is replayed too
            if self._stream is None:   # opened while the runner restarted: open it now, if it is back
                fut = self._reopen()
                if self._stream is not None:
                    logger.info("STT: the recogniser is back; %.1f s heard while it restarted go into "
                                "a new stream", self._heard_samples / self._engine.model.config.sample_rate_hz)
                return fut
            return self._stream.push(x)
        except AudioInputError as exc:
            raise AudioFormatError(str(exc)) from exc

    def finish(self) -> list[Future]:
        """Flush the resampler, pad with silence, close. -> futures to ``take`` in order."""
        futures = []
        if self._resampler is not None:
            rest = self._resampler.resample_chunk(np.zeros(0, np.float32), last=True)
            self._resampler = None          # flushed once: a finish after a replay has no rest
            if rest.size:
                self._keep(rest)
                fut = self._stream.push(rest) if self._stream is not None else None
                if fut is not None:
                    futures.append(fut)
        if self._stream is None:      # still no stream: the service recovers (waits) and finishes
            raise RunnerClosedError("the recogniser is restarting: the utterance has no stream yet")
        if self._final_pass is not None:
            final = self._final_pass.finish()
            if self._final_pass.early_final:   # made while the VAD's stop timer ran, or being made
                self._stream.abort()           # (first in its worker): the stream's flush is not
                return [final]                 # waited for; its partial is the fallback
            return [*futures, self._stream.finish(), final]
        futures.append(self._stream.finish())
        return futures

    def _take_result(self, result: torch.Tensor | Recognition | None) -> bool:
        if isinstance(result, Recognition) or result is None:    # the final pass's (None: failed)
            if result is None:
                return False
            self._final = result
            return True
        assert self._stream is not None, "a result with no stream to decode it"
        return self._stream.take(result)

    def take(self, result: torch.Tensor | Recognition | None) -> bool:
        """Decode a result here (blocking: evaluation, scripts). True if the text changed."""
        return self._take_result(result)

    async def take_async(self, fut: Future) -> bool:
        """Await a push/finish future and decode its result (greedy, and the beam search when
        on) here, in order; the final pass's result is the final. True if the text changed."""
        return self._take_result(await asyncio.wrap_future(fut))

    def finish_sync(self) -> str:
        """Blocking finish (evaluation, scripts): the final transcript."""
        for fut in self.finish():
            self.take(fut.result())
        return self.text

    def pause(self, paused: bool) -> None:
        """The VAD's stop timer started (``paused``) or was cancelled by speech: with a final
        pass, its early final begins (``FinalPass.pause``)."""
        if self._final_pass is not None:
            self._final_pass.pause(paused)

    @property
    def early_final(self) -> bool:
        """The final (once ``finish`` was called) is one begun before it, at a pause or the quiet."""
        return self._final_pass is not None and self._final_pass.early_final

    def abort(self) -> None:
        if self._final_pass is not None:
            self._final_pass.abort()
        if self._stream is not None:
            self._stream.abort()


class SSMSTTEngine:
    """A loaded STTModel and the BatchRunner thread that steps every utterance of the process.

    ``SSMSTTEngine.shared(model_dir, decoder, compile=..., runner=...)`` returns one started engine
    per folder and settings (thread-safe); construct one directly (and ``close()`` it) in tests."""

    _shared: dict[tuple[Path, str, bool, str], SSMSTTEngine] = {}
    _shared_lock = threading.Lock()

    def __init__(self, model: STTModel | WhisperSTTModel | str | Path = DEFAULT_MODEL_DIR, *,
                 flush_s: float = 0.1, decoder: Decoder = "beam", lm_path: str | Path | None = None,
                 beam_config: BeamConfig | None = None,
                 runner: Runner = "thread",
                 stride: int = DEFAULT_STRIDE, compile: bool | None = None,
                 device: str = "cpu", final_pass: bool | None = None,
                 final_decoder: str | None = None, final_procs: int | None = None) -> None:
        """decoder="beam" needs an LM: ``lm_path``, else ``lm.arpa.gz`` in the model folder
        (or in models/stt when ``model`` is an STTModel object); for a model with a phone head
        it searches both heads with the folder's ``lexicon.dict.gz`` (``Decoder``; "char-beam"
        and "phone-beam" search one). ``runner="process"`` steps the
        model in a child process (``runner_procs.RunnerProcess``: its own GIL) instead of a
        thread of this one; it needs ``model`` as a folder. ``stride``: 20 ms steps per model
        run of an utterance. ``compile`` (default ``DEFAULT_COMPILE``): compile the
        ``stride``-frame prefill before taking traffic (``STTModel.compile_prefill``; CPU only).
        ``device``: ``cpu``, ``cuda[:N]`` or ``auto`` (``ssm_engine.device.resolve_device``);
        audio and log-probs stay on the CPU, the batcher moves them. ``final_pass``: decode
        finals with the folder's ``final/`` model (the module docstring); None (the default)
        when the folder has one, True requires it, False never. ``final_decoder``: "whisper"
        (Whisper's own decoder makes the final, ``whisper_final``) or "ctc" (the final model's
        heads and search); None (the default): as the final folder's ``decoder.json`` says.
        ``final_procs``: the final pass's worker processes with ``runner="process"`` (default: one
        a usable core, up to ``FINAL_PROCS``)."""
        if isinstance(stride, bool) or not isinstance(stride, int) or stride < 1:
            raise PipelineError(f"stride must be a positive number of 20 ms steps, got {stride!r}")
        compile = DEFAULT_COMPILE if compile is None else compile
        if runner not in ("thread", "process"):
            raise PipelineError(f"runner must be 'thread' or 'process', got {runner!r}")
        if final_procs is None:
            final_procs = max(1, min(FINAL_PROCS, int(usable_cores())))
        if isinstance(final_procs, bool) or not isinstance(final_procs, int) or not 1 <= final_procs <= 16:
            raise PipelineError(f"final_procs must be 1..16 worker processes, got {final_procs!r}")
        if runner == "process" and isinstance(model, (STTModel, WhisperSTTModel)):
            raise PipelineError("runner='process' needs the model's folder, not a loaded model")
        try:
            target = resolve_device(device)
        except SSMEngineError as exc:
            raise EngineUnavailableError(f"SSM STT: {exc}") from None
        if runner == "process" and target.type != "cpu":
            raise PipelineError("runner='process' steps the model on the CPU; a GPU takes the "
                                "thread runner (one process batches every stream)")
        if decoder not in ("greedy", "beam", "char-beam", "phone-beam"):
            raise PipelineError(f"decoder must be 'greedy', 'beam', 'char-beam' or 'phone-beam', "
                                f"got {decoder!r}")
        t0 = time.perf_counter()
        self.decoder: Decoder = decoder
        self.beam: CTCBeamSearch | PhoneBeamSearch | JointSearch | None = None
        # the search's files and settings, for a final-pass worker that loads them itself
        self._worker_search: tuple[Path, BeamConfig, Path | None, str] | None = None
        if isinstance(model, (STTModel, WhisperSTTModel)):
            folder, folder_of_model = DEFAULT_MODEL_DIR, None
        else:
            folder = Path(model)
            folder_of_model = folder.resolve()
            try:
                model = load_recognizer(model)
            except SSMEngineError as exc:
                raise EngineUnavailableError(f"SSM STT model failed to load: {exc} (train one "
                                             f"with `parley train stt`)") from exc
        self.model = model.eval().to(target)
        self.device = target
        self.final_model: WhisperSTTModel | None = None   # the final pass in this process, or
        self.final_procs: list[FinalPassProcess] = []      # in worker processes (runner="process")
        self._next_final = itertools.count()
        self._final_pool: ThreadPoolExecutor | None = None
        final_dir = folder / FINAL_DIR
        use_final = bool(final_pass or (final_pass is None and folder_of_model is not None
                                        and (final_dir / "config.json").exists()))
        # the final pass's own rescoring weights for turns with no hints, if its folder chose some
        # (stt_loading.SEARCH_FILE)
        self.free_weights = search_weights(final_dir) if use_final else None
        if final_decoder not in (None, "whisper", "ctc"):
            raise PipelineError(f"final_decoder must be 'whisper' or 'ctc', got {final_decoder!r}")
        self.final_decoder = ((final_decoder or final_decoder_choice(final_dir)) if use_final
                              else None)
        self.final_whisper: WhisperFinal | None = None
        if use_final and runner == "thread":
            self.final_model = load_final_model(final_dir, target)
            self._check_final(final_dir, self.final_model.config.phone_vocab_size,
                              model.config.phone_vocab_size)
            # the pieces of every utterance of the process, one at a time (the beam searches
            # share the LM's and lexicon's caches, which the event loop used alone before)
            self._final_pool = ThreadPoolExecutor(1, thread_name_prefix="ssm-stt-final")
            if self.final_decoder == "whisper":
                self.final_whisper = shared_whisper_final()
        if decoder != "greedy":
            lexicon = None
            if decoder == "phone-beam" or (decoder == "beam" and model.config.phone_vocab_size):
                if not model.config.phone_vocab_size:
                    raise PipelineError("decoder='phone-beam' needs a model with a phone head")
                lexicon = (folder / LEXICON_FILE).resolve()
                if not lexicon.exists():
                    raise EngineUnavailableError(f"SSM STT: the model has a phone head but "
                                                 f"{lexicon} is missing (decoder='char-beam' "
                                                 f"searches over characters instead)")
            search = (Path(lm_path or folder / LM_FILE).resolve(), beam_config or BeamConfig(), lexicon,
                      "phones" if decoder == "phone-beam" else "joint")
            if use_final and runner == "process":   # only the final pass's worker searches: it loads
                self._worker_search = search         # the LM, this process need not
            else:
                self.beam = _beam_search(*search, self.free_weights)
        self.flush_s = flush_s
        # a recogniser on Whisper's encoder steps whole hops: the stride is rounded up to them
        block = getattr(model.config, "hop_frames", 1)
        self.stride = -(-stride // block) * block
        # how far partials trail the audio beyond the pure recogniser's: a hop waited for, and
        # the encoder's look-ahead (the spelling pause waits this much longer for more letters)
        self.partial_lag_s = (0.0 if block == 1 else
                              (block + getattr(model.config, "lookahead_frames", 0))
                              / model.config.frame_rate_hz)
        # torch.compile's CPU graph (inductor, C++); on a GPU the eager step is fast enough; the
        # encoder recogniser runs eagerly (its cost is the encoder's matrix products)
        compile_frames = (stride if compile and stride > 1 and target.type == "cpu"
                          and isinstance(model, STTModel) else 0)
        self.runner: StreamRunner
        if runner == "process":
            self.runner = RunnerProcess("ssm_engine.stt.recognizers:load_stt_compiled",
                                        [str(folder_of_model), str(compile_frames)], name="ssm-stt")
        else:
            if (compile_frames and isinstance(self.model, STTModel)
                    and self.model.compiled_frames != compile_frames):
                t1 = time.perf_counter()
                try:
                    self.model.compile_prefill(compile_frames)
                except Exception as exc:  # inductor raises its own types (no compiler, ...)
                    raise EngineUnavailableError(f"SSM STT: compiling the {compile_frames}-frame "
                                                 f"prefill failed: {exc} (compile=False runs "
                                                 f"it eagerly)") from exc
                logger.info("SSM STT: %d-frame prefill compiled in %.1f s", compile_frames,
                            time.perf_counter() - t1)
            self.runner = BatchRunner(self.model, name="ssm-stt-runner",
                                      prefill_min=getattr(self.model, "prefill_min",
                                                          DEFAULT_PREFILL_MIN))
        try:
            self.runner.start()
        except SSMEngineError as exc:
            raise EngineUnavailableError(f"SSM STT runner failed to start: {exc}") from exc
        if use_final and runner == "process":
            self.final_procs = self._start_finals(final_dir, final_procs)
            self._check_final(final_dir, self.final_procs[0].phone_vocab_size,
                              model.config.phone_vocab_size)
        self.load_s = time.perf_counter() - t0

    @property
    def has_final_pass(self) -> bool:
        """Finals come from the final pass (in this process or a worker)."""
        return self.final_model is not None or bool(self.final_procs)

    @property
    def final_proc(self) -> FinalPassProcess | None:
        """The first final-pass worker process (None: the final pass runs in this one)."""
        return self.final_procs[0] if self.final_procs else None

    def final_worker(self) -> FinalPassProcess | None:
        """The worker an utterance's pieces go to, in turn (None: in this process)."""
        if not self.final_procs:
            return None
        return self.final_procs[next(self._next_final) % len(self.final_procs)]

    @staticmethod
    def _check_final(final_dir: Path, final_phones: int, stream_phones: int) -> None:
        if bool(final_phones) != bool(stream_phones):
            raise EngineUnavailableError(f"SSM STT: {final_dir} has {'a' if final_phones else 'no'} "
                                         f"phone head, the stream's model "
                                         f"{'has' if stream_phones else 'has not'}")

    def _start_finals(self, final_dir: Path, n: int) -> list[FinalPassProcess]:
        """The final pass in ``n`` worker processes, started side by side, with the search this
        engine would run."""
        args = [str(final_dir.resolve()), "", "", "greedy", "{}", "", self.final_decoder or "ctc"]
        if self._worker_search is not None:
            lm, config, lexicon, kind = self._worker_search
            args[1:5] = [str(lm), str(lexicon or ""), kind, json.dumps(dataclasses.asdict(config))]
        if self.free_weights is not None:
            args[5] = json.dumps(dataclasses.asdict(self.free_weights))
        procs = [FinalPassProcess(args, name="ssm-stt-final" if i == 0 else f"ssm-stt-final-{i + 1}")
                 for i in range(n)]
        with ThreadPoolExecutor(n) as pool:
            started = [pool.submit(proc.start) for proc in procs]
        failed = [f.exception() for f in started if f.exception() is not None]
        if failed:
            for proc in procs:
                proc.stop()
            self.runner.stop()
            raise EngineUnavailableError(f"SSM STT: the final pass did not start: {failed[0]}") from failed[0]
        return procs

    @classmethod
    def shared(cls, model_dir: str | Path = DEFAULT_MODEL_DIR, decoder: Decoder = "beam", *,
               compile: bool = DEFAULT_COMPILE, runner: Runner = "thread") -> SSMSTTEngine:
        key = (Path(model_dir).resolve(), decoder, bool(compile), runner)
        with cls._shared_lock:
            engine = cls._shared.get(key)
            if engine is None:
                engine = cls._shared[key] = cls(key[0], decoder=decoder, compile=compile, runner=runner)
            return engine

    @classmethod
    def shared_engines(cls) -> list[SSMSTTEngine]:
        """The engines ``shared()`` has built so far (``/metrics`` asks their runners)."""
        with cls._shared_lock:
            return list(cls._shared.values())

    def open(self, sample_rate_hz: int, hints: Hints = NO_HINTS) -> RecognizerUtterance:
        if sample_rate_hz not in SUPPORTED_RATES_HZ:
            raise AudioFormatError(f"sample_rate_hz={sample_rate_hz} not in {SUPPORTED_RATES_HZ}")
        return RecognizerUtterance(self, sample_rate_hz, hints)

    def transcribe(self, pcm: np.ndarray | bytes, sample_rate_hz: int, chunk_ms: int = 20) -> str:
        """Stream one whole clip through, ``chunk_ms`` at a time (blocking)."""
        utt = self.open(sample_rate_hz)
        x = np.frombuffer(pcm, "<i2") if isinstance(pcm, (bytes, bytearray)) else np.asarray(pcm)
        step = sample_rate_hz * chunk_ms // 1000
        for i in range(0, len(x), step):
            fut = utt.push(x[i:i + step])
            if fut is not None:
                utt.take(fut.result())
        return utt.finish_sync()

    def close(self) -> None:
        self.runner.stop()
        for proc in self.final_procs:
            proc.stop()
        if self._final_pool is not None:
            self._final_pool.shutdown(wait=False, cancel_futures=True)


# -- the SSM recogniser behind a TranscriptStream -------------------------------------------------
class SSMRecognizerBackend:
    errors: tuple[type[Exception], ...] = (PipelineError, SSMEngineError)

    def __init__(self, engine: SSMSTTEngine | RemoteRecognizerEngine | None = None, *,
                 model_dir: str | Path = DEFAULT_MODEL_DIR, decoder: Decoder | None = None,
                 compile: bool = DEFAULT_COMPILE, runner: Runner = "thread") -> None:
        self.engine = engine
        self.model_dir = model_dir
        self.decoder: Decoder = decoder or DEFAULT_DECODER
        self.compile = compile
        self.runner: Runner = runner

    async def start(self, sample_rate_hz: int, report: Callable[[Exception], None]) -> None:
        if sample_rate_hz not in SUPPORTED_RATES_HZ:
            raise AudioFormatError(f"SSMSTTService: sample rate {sample_rate_hz} not in "
                                   f"{SUPPORTED_RATES_HZ}")
        if self.engine is None:
            self.engine = await asyncio.to_thread(functools.partial(
                SSMSTTEngine.shared, self.model_dir, self.decoder, compile=self.compile,
                runner=self.runner))

    @property
    def partial_lag_s(self) -> float:
        """How much later than the pure SSM recogniser's its partials come (0 before start)."""
        return float(getattr(self.engine, "partial_lag_s", 0.0))

    async def open(self, sample_rate_hz: int, hints: Hints) -> _SSMUtterance:
        assert self.engine is not None, "open before start"
        return _SSMUtterance(self.engine.open(sample_rate_hz, hints))

    async def close(self) -> None:
        """The engine is shared by the process's calls: nothing to let go."""


class _SSMUtterance:
    def __init__(self, utt: RecognizerUtterance | RemoteRecognizerUtterance) -> None:
        self._utt = utt

    @property
    def heard(self) -> str:
        return self._utt.text

    async def push(self, pcm: bytes) -> str | None:
        try:
            fut = self._utt.push(pcm)
            changed = fut is not None and await self._utt.take_async(fut)
        except SSMEngineError:
            if await self._recovered():
                return None
            raise
        return self._utt.text if changed else None

    def pause(self, paused: bool) -> None:
        self._utt.pause(paused)

    async def finish(self) -> tuple[str, Recognition | None]:
        try:
            for fut in self._utt.finish():
                await self._utt.take_async(fut)
        except SSMEngineError:
            if not await self._recovered():
                raise
            for fut in self._utt.finish():    # the replayed utterance, finished again
                await self._utt.take_async(fut)
        return self._utt.text, self._utt.recognition

    async def _recovered(self) -> bool:
        """After the runner lost the utterance's stream: replay it onto the restarted runner.
        True when it was (the caller's words so far are not lost). The model tier's utterances
        fail over by themselves and are never replayed here."""
        if not isinstance(self._utt, RecognizerUtterance):
            return False
        try:
            seconds = await self._utt.recover()
        except SSMEngineError as exc:
            logger.warning("STT: the recogniser's stream was lost and could not be replayed: %s", exc)
            return False
        logger.warning("STT: the recogniser restarted; the utterance so far (%.1f s) was replayed "
                       "into it", seconds)
        return True

    def abort(self) -> None:
        try:
            self._utt.abort()
        except SSMEngineError:
            pass  # the runner forgot the stream already
