"""STTModel: streaming character-CTC speech recogniser = log-mel front end + SSMStack + linear.

    model = STTModel(STTConfig())
    logits = model.forward(audio)                  # audio (b, n*160) at 8 kHz -> (b, n, V)
    state = model.init_state(batch=k)              # STTState: front end + stack state
    y, state = model.step(chunk, state)            # chunk (k, 160) = 20 ms -> (k, V) log-probs
    y, state = model.prefill(frames, state)        # frames (k, n, 160) -> (k, n, V): n steps at once
    save_stt(model, "models/stt"); model = load_stt("models/stt")

``step`` takes one 20 ms chunk of 8 kHz audio per stream and returns one frame of CTC
log-probabilities (50 frames per second), so it batches through ssm_engine's StreamBatcher and
BatchRunner like any StreamingModel (d_in = step_samples, d_out = ``out_size``: the vocabulary,
plus the phones with a phone head, ``phone_vocab_size``, see phones.py). ``forward``
(training) returns the same frames for a whole clip; stepping equals forward (test_stt_model).
16 kHz audio is resampled to 8 kHz by the caller (``prepare_audio`` does it for whole clips).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from ..checkpoint import load_weights, read_checkpoint, write_checkpoint
from ..device import model_device
from ..config import SSMConfig
from ..errors import CheckpointFormatError, ConfigError
from ..stack import SSMStack
from ..state import StackState, StreamState
from .errors import AudioInputError
from .frontend import NORMS, LogMelFrontEnd
from .phones import PHONES
from .text import VOCAB

__all__ = ["STTConfig", "STTModel", "STTState", "save_stt", "load_stt",
           "prepare_audio", "CHECKPOINT_KIND"]

CHECKPOINT_KIND = "STTModel"


def _default_ssm() -> dict[str, Any]:
    return SSMConfig(d_model=256, n_layers=6, d_state=64, headdim=64, expand=2).to_dict()


@dataclass(frozen=True)
class STTConfig:
    """Sizes of the recogniser. ``ssm`` is an SSMConfig as a dict (JSON-able)."""

    sample_rate_hz: int = 8000
    step_samples: int = 160          # 20 ms: one output frame (50 Hz)
    hop_samples: int = 80            # 10 ms mel hop
    win_samples: int = 200           # 25 ms mel window
    n_fft: int = 256
    n_mels: int = 64
    conv_channels: int = 256
    vocab_size: int = len(VOCAB)
    phone_vocab_size: int = 0        # len(PHONES): a second CTC head over phones (0: none)
    norm: str = "fixed"              # feature normalisation: "fixed" statistics, or "stream"
    norm_tau: int = 200              # with "stream": the running mean's time constant, mel frames
    ssm: dict[str, Any] = field(default_factory=_default_ssm)

    def __post_init__(self) -> None:
        for name in ("sample_rate_hz", "step_samples", "hop_samples", "win_samples", "n_fft",
                     "n_mels", "conv_channels", "vocab_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"STTConfig.{name} must be a positive int, got {value!r}")
        if self.vocab_size != len(VOCAB):
            raise ConfigError(f"STTConfig.vocab_size must be {len(VOCAB)}, got {self.vocab_size}")
        if self.phone_vocab_size not in (0, len(PHONES)) or isinstance(self.phone_vocab_size, bool):
            raise ConfigError(f"STTConfig.phone_vocab_size must be 0 or {len(PHONES)}, got "
                              f"{self.phone_vocab_size!r}")
        if self.norm not in NORMS:
            raise ConfigError(f"STTConfig.norm must be one of {NORMS}, got {self.norm!r}")
        if isinstance(self.norm_tau, bool) or not isinstance(self.norm_tau, int) or self.norm_tau < 1:
            raise ConfigError(f"STTConfig.norm_tau must be a positive int, got {self.norm_tau!r}")
        SSMConfig.from_dict(self.ssm)

    @property
    def ssm_config(self) -> SSMConfig:
        return SSMConfig.from_dict(self.ssm)

    @property
    def frame_rate_hz(self) -> float:
        return self.sample_rate_hz / self.step_samples

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> STTConfig:
        if not isinstance(data, dict):
            raise ConfigError(f"STTConfig must be a JSON object, got {type(data).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"STTConfig: unknown keys {unknown}")
        try:
            return cls(**data)
        except TypeError as exc:
            raise ConfigError(f"STTConfig: {exc}") from exc


def heads_log_probs(head: nn.Module, phone_head: nn.Module | None, y: torch.Tensor) -> torch.Tensor:
    """A recogniser's streaming output from its last hidden states ``y``: character log-probs,
    then (with a phone head) phone log-probs in the same row (``out_size`` columns)."""
    chars = torch.log_softmax(head(y), dim=-1)
    if phone_head is None:
        return chars
    return torch.cat([chars, torch.log_softmax(phone_head(y), dim=-1)], dim=-1)


class STTState(StreamState):
    """Front-end tensors (``fe_*``) plus the SSMStack's (``conv{i}``, ``ssm{i}``, ``logscale{i}``)."""

    __slots__ = ()

    def stack_state(self) -> StackState:
        """A StackState sharing this state's tensors (stepping it updates them in place)."""
        return StackState({k: v for k, v in self.tensors.items() if not k.startswith("fe_")})


class STTModel(nn.Module):
    """See the module docstring. Implements ssm_engine's StreamingModel protocol."""

    def __init__(self, config: STTConfig) -> None:
        super().__init__()
        self.config = config
        ssm = config.ssm_config
        self.frontend = LogMelFrontEnd(
            sample_rate_hz=config.sample_rate_hz, step_samples=config.step_samples,
            hop_samples=config.hop_samples, win_samples=config.win_samples, n_fft=config.n_fft,
            n_mels=config.n_mels, channels=config.conv_channels, d_out=ssm.d_model,
            norm=config.norm, norm_tau=config.norm_tau)
        self.stack = SSMStack(ssm)
        self.head = nn.Linear(ssm.d_model, config.vocab_size)
        self.phone_head = (nn.Linear(ssm.d_model, config.phone_vocab_size)
                           if config.phone_vocab_size else None)
        self._compiled: Callable[..., Any] | None = None
        self._compiled_frames = 0

    # -- checks -------------------------------------------------------------------------------
    def _check_audio(self, audio: torch.Tensor, *, step: bool) -> None:
        if not isinstance(audio, torch.Tensor) or audio.dim() != 2:
            got = tuple(audio.shape) if isinstance(audio, torch.Tensor) else type(audio).__name__
            raise AudioInputError(f"audio must be a (batch, samples) tensor, got {got}")
        n = audio.shape[1]
        if step and n != self.config.step_samples:
            raise AudioInputError(f"step takes {self.config.step_samples} samples (20 ms at "
                                  f"{self.config.sample_rate_hz} Hz) per stream, got {n}")
        if not step and (n == 0 or n % self.config.step_samples):
            raise AudioInputError(f"forward takes a positive multiple of {self.config.step_samples}"
                                  f" samples, got {n} (use prepare_audio to pad)")
        if not bool(torch.isfinite(audio).all()):
            raise AudioInputError("audio holds NaN or infinite samples")

    # -- StreamingModel -------------------------------------------------------------------------
    def init_state(self, batch: int) -> STTState:
        return STTState({**self.frontend.init_state(batch), **self.stack.init_state(batch).tensors})

    def state_from_bytes(self, data: bytes) -> STTState:
        return STTState.from_bytes(data, self.init_state(1))

    @torch.no_grad()
    def step(self, audio: torch.Tensor, state: STTState) -> tuple[torch.Tensor, STTState]:
        """audio (b, step_samples) float in [-1, 1] -> (log-probs (b, out_size), state advanced in
        place): V character columns, then the phones' with a phone head."""
        self._check_audio(audio, step=True)
        x, fe = self.frontend.step(audio, state.tensors)
        stack_state = state.stack_state()
        y, stack_state = self.stack.step(x, stack_state)
        state.tensors.update(fe)
        state.tensors.update(stack_state.tensors)
        return self._log_probs(y), state

    def _log_probs(self, y: torch.Tensor) -> torch.Tensor:
        return heads_log_probs(self.head, self.phone_head, y)

    @property
    def out_size(self) -> int:
        """Columns of a streaming output row: the characters, then the phones if any."""
        return self.config.vocab_size + self.config.phone_vocab_size

    @torch.no_grad()
    def prefill(self, frames: torch.Tensor, state: STTState) -> tuple[torch.Tensor, STTState]:
        """frames (b, n, step_samples) -> (log-probs (b, n, V), state): n steps in one parallel
        pass (the chunked scan), equal to stepping n times and several times cheaper from ~8
        frames on; StreamBatcher uses it for a stream with a backlog (a pre-roll, a late tick)."""
        if not isinstance(frames, torch.Tensor) or frames.dim() != 3:
            got = tuple(frames.shape) if isinstance(frames, torch.Tensor) else type(frames).__name__
            raise AudioInputError(f"prefill takes (batch, n, samples) frames, got {got}")
        if frames.shape[2] != self.config.step_samples:
            raise AudioInputError(f"prefill frames hold {self.config.step_samples} samples each, "
                                  f"got {frames.shape[2]}")
        audio = frames.reshape(frames.shape[0], -1)
        self._check_audio(audio, step=False)
        run, tensors = self._prefill_tensors, dict(state.tensors)
        if self._compiled is not None and frames.shape[:2] == (1, self._compiled_frames):
            # the compiled graph is specialised to its inputs' layout: a state tensor with other
            # strides or at an offset in its storage (a slice a pass returned) would make
            # torch.compile recompile (seconds) in the middle of a call
            run = self._compiled
            audio = _plain(audio)
            tensors = {k: _plain(v) for k, v in tensors.items()}
        y, tensors = run(audio, tensors)
        state.tensors.update(tensors)
        return y, state

    def _prefill_tensors(self, audio: torch.Tensor, tensors: dict[str, torch.Tensor]
                         ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The pure core of ``prefill`` (what ``compile_prefill`` compiles): audio (b, n*step)
        and the state's tensors -> (log-probs (b, n, V), the new state's tensors)."""
        x, fe = self.frontend.prefill(audio, tensors)
        stack = StackState({k: v for k, v in tensors.items() if not k.startswith("fe_")})
        y, stack = self.stack.forward(x, stack)
        return self._log_probs(y), {**fe, **stack.tensors}

    def compile_prefill(self, frames: int) -> None:
        """Compile ``prefill`` of one stream and exactly ``frames`` frames with torch.compile
        (inductor, C++ on CPU) and compile it now. A lone stream stepped ``frames`` at a time
        (RecognizerStream's ``stride``) then costs ~0.5 ms a frame instead of ~1.5 ms eager (1
        thread; benchmarks/bench_stt_rtf.py). Batches of streams and other lengths stay eager:
        batching already spreads the per-call cost, and a graph per batch size would mean a
        compile (~30 s) whenever a new size turned up. Compiling takes ~30 s cold, a few seconds
        from inductor's on-disk cache. Needs a C++ compiler (g++)."""
        if isinstance(frames, bool) or not isinstance(frames, int) or frames < 1:
            raise ConfigError(f"compile_prefill takes a positive frame count, got {frames!r}")
        self._compiled_frames = frames
        self._compiled = torch.compile(self._prefill_tensors, dynamic=False)
        # twice, from a fresh state and from the state a pass returns: any second graph is
        # compiled now, not in a call (prefill hands the graph contiguous inputs, see _plain)
        state = self.init_state(1)
        for _ in range(2):
            _, state = self.prefill(torch.zeros(1, frames, self.config.step_samples,
                                                 device=model_device(self)), state)

    @property
    def compiled_frames(self) -> int:
        """The frame count ``compile_prefill`` compiled for (0: not compiled)."""
        return self._compiled_frames if self._compiled is not None else 0

    def forward(self, audio: torch.Tensor,
                feature_augment: Callable[[torch.Tensor], torch.Tensor] | None = None
                ) -> torch.Tensor:
        """audio (b, n*step_samples) -> logits (b, n, V) (unnormalised; CTC takes log_softmax).
        ``feature_augment`` (training only) rewrites the normalised log-mel features first."""
        return self.forward_heads(audio, feature_augment)[0]

    def forward_heads(self, audio: torch.Tensor,
                      feature_augment: Callable[[torch.Tensor], torch.Tensor] | None = None
                      ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``forward``'s character logits and the phone head's (b, n, len(PHONES)), or None for
        a model without one."""
        self._check_audio(audio, step=False)
        x = self.frontend(audio, feature_augment)
        y, _ = self.stack(x)
        return self.head(y), (self.phone_head(y) if self.phone_head is not None else None)

    def n_params(self) -> int:
        return sum(p.numel() for p in self.parameters())


def prepare_audio(samples: np.ndarray, sample_rate_hz: int, config: STTConfig) -> torch.Tensor:
    """A whole clip (int16 or float in [-1, 1]) at 8 or 16 kHz -> (1, n*step) float at the model
    rate, zero-padded up to whole steps. Raises AudioInputError for what the model cannot take."""
    x = np.asarray(samples)
    if x.ndim != 1:
        raise AudioInputError(f"expected mono samples (1-D), got shape {x.shape}")
    if x.size == 0:
        raise AudioInputError("empty audio")
    if x.dtype == np.int16:
        x = x.astype(np.float32) / 32768.0
    x = x.astype(np.float32)
    if not np.isfinite(x).all():
        raise AudioInputError("audio holds NaN or infinite samples")
    if sample_rate_hz == 2 * config.sample_rate_hz:
        from ..data.audio import resample
        x = resample(x, sample_rate_hz, config.sample_rate_hz)
    elif sample_rate_hz != config.sample_rate_hz:
        raise AudioInputError(f"sample rate {sample_rate_hz} Hz is not supported (use "
                              f"{config.sample_rate_hz} or {2 * config.sample_rate_hz})")
    pad = (-x.size) % config.step_samples
    return torch.from_numpy(np.concatenate([x, np.zeros(pad, np.float32)]))[None]


def _plain(t: torch.Tensor) -> torch.Tensor:
    """``t`` itself if contiguous from the start of its storage, else such a copy."""
    if t.is_contiguous() and t.storage_offset() == 0:
        return t
    return t.clone(memory_format=torch.contiguous_format)


def save_stt(model: STTModel, directory: str | Path) -> Path:
    """Weights (with the feature statistics) + config -> directory."""
    return write_checkpoint(directory, model, CHECKPOINT_KIND, model.config.to_dict())


def load_stt(directory: str | Path) -> STTModel:
    """Load a checkpoint written by ``save_stt``; errors name the offending file."""
    directory = Path(directory)
    config, tensors = read_checkpoint(directory, CHECKPOINT_KIND)
    try:
        cfg = STTConfig.from_dict(config)
    except ConfigError as exc:
        raise CheckpointFormatError(directory / "config.json", f"invalid config: {exc}") from exc
    model = STTModel(cfg)
    load_weights(model, tensors, directory / "model.safetensors")
    return model.eval()
