"""WhisperSTTModel: the recogniser that hears through Whisper tiny.en's encoder, streamed.

    model = WhisperSTTModel(WhisperSTTConfig())          # reads the encoder from the wheel
    state = model.init_state(batch=k)
    y, state = model.prefill(frames, state)              # frames (k, n, 160), n a multiple of hop
    feats = model.stream_encoder.clip_features(audio)    # training: the stream's features
    logits, phones = model.forward_features(feats)       # (b, n, 384) -> heads
    save_whisper_stt(model, "models/stt"); load_stt("models/stt") -> either kind

The acoustic front end is Whisper tiny.en's encoder (frozen, 7.6 M parameters learnt from
680,000 hours of people; ``whisper_encoder.py``), run as a stream by ``StreamingWhisperEncoder``;
on its 384 numbers a frame, 50 frames a second, a linear map into parley's Mamba-2 stack and the
same two CTC heads as ``STTModel`` (characters, then phones): everything after the heads (beam
searches, rescoring, hints, spotting, spelling) is unchanged. Only the map, the stack and the
heads are trained and saved; the encoder's weights are read from the installed wheel at load.

It speaks ssm_engine's StreamingModel protocol with one difference: the encoder runs a hop at a
time, so ``prefill`` takes whole hops (``hop_frames`` 20 ms frames) and ``step`` only works with
a hop of one. ``block_frames`` says so to RecognizerStream (it pads its last push to whole hops)
and ``prefill_min`` to the BatchRunner (every hop goes through ``prefill``).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..checkpoint import load_weights, read_checkpoint, write_checkpoint
from ..config import SSMConfig
from ..errors import CheckpointFormatError, ConfigError
from ..stack import SSMStack
from ..state import StackState, StreamState
from .errors import AudioInputError
from .model import heads_log_probs
from .phones import PHONES
from .text import VOCAB
from .whisper_encoder import D_MODEL, WhisperEncoder
from .whisper_stream import STEP_SAMPLES, StreamingWhisperEncoder

__all__ = ["WhisperSTTConfig", "WhisperSTTModel", "WhisperSTTState", "save_whisper_stt",
           "load_whisper_stt", "CHECKPOINT_KIND", "shared_encoder"]

CHECKPOINT_KIND = "WhisperSTTModel"
_ENCODER: WhisperEncoder | None = None


def shared_encoder() -> WhisperEncoder:
    """Whisper tiny.en's encoder, read from the wheel once a process (frozen, eval mode)."""
    global _ENCODER
    if _ENCODER is None:
        enc = WhisperEncoder.from_weights()
        for p in enc.parameters():
            p.requires_grad_(False)
        _ENCODER = enc
    return _ENCODER


FEATURE_KINDS = ("stream", "utterance")


def _default_ssm() -> dict[str, Any]:
    return SSMConfig(d_model=256, n_layers=3, d_state=64, headdim=64, expand=2).to_dict()


@dataclass(frozen=True)
class WhisperSTTConfig:
    """Sizes of the recogniser; the window, hop and look-ahead are in 20 ms encoder frames."""

    window_frames: int = 75          # 1.5 s: the audio each encoding hears
    hop_frames: int = 10             # 200 ms: how often the encoder runs (partials this often)
    lookahead_frames: int = 4        # frames of the future each kept frame has heard (80 ms)
    features: str = "stream"         # what it was trained on: "stream" (the sliding windows a
    #                                  call's stream computes) or "utterance" (each utterance
    #                                  encoded whole at its end: a final pass)
    sample_rate_hz: int = 8000
    step_samples: int = STEP_SAMPLES
    vocab_size: int = len(VOCAB)
    phone_vocab_size: int = len(PHONES)
    ssm: dict[str, Any] = field(default_factory=_default_ssm)

    def __post_init__(self) -> None:
        if self.sample_rate_hz != 8000 or self.step_samples != STEP_SAMPLES:
            raise ConfigError("WhisperSTTConfig hears 8 kHz audio in 20 ms (160-sample) steps")
        if self.vocab_size != len(VOCAB):
            raise ConfigError(f"WhisperSTTConfig.vocab_size must be {len(VOCAB)}, got {self.vocab_size}")
        if self.phone_vocab_size not in (0, len(PHONES)) or isinstance(self.phone_vocab_size, bool):
            raise ConfigError(f"WhisperSTTConfig.phone_vocab_size must be 0 or {len(PHONES)}")
        for name in ("window_frames", "hop_frames", "lookahead_frames"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < (name != "lookahead_frames"):
                raise ConfigError(f"WhisperSTTConfig.{name} must be a whole number of frames, got {v!r}")
        if self.features not in FEATURE_KINDS:
            raise ConfigError(f"WhisperSTTConfig.features must be one of {FEATURE_KINDS}, got "
                              f"{self.features!r}")
        if self.hop_frames + self.lookahead_frames > self.window_frames:
            raise ConfigError("WhisperSTTConfig: hop + look-ahead must fit in the window")
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
    def from_dict(cls, data: Any) -> WhisperSTTConfig:
        if not isinstance(data, dict):
            raise ConfigError(f"WhisperSTTConfig must be a JSON object, got {type(data).__name__}")
        unknown = sorted(set(data) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise ConfigError(f"WhisperSTTConfig: unknown keys {unknown}")
        try:
            return cls(**data)
        except TypeError as exc:
            raise ConfigError(f"WhisperSTTConfig: {exc}") from exc


class WhisperSTTState(StreamState):
    """The encoder's window (``we_*``) plus the SSMStack's tensors."""

    __slots__ = ()

    def stack_state(self) -> StackState:
        return StackState({k: v for k, v in self.tensors.items() if not k.startswith("we_")})


class WhisperSTTModel(nn.Module):
    """See the module docstring."""

    def __init__(self, config: WhisperSTTConfig, encoder: WhisperEncoder | None = None) -> None:
        super().__init__()
        self.config = config
        ssm = config.ssm_config
        enc = encoder if encoder is not None else shared_encoder()
        # kept out of the module tree: not trained, not saved (the wheel has it), moved by _apply
        self.__dict__["stream_encoder"] = StreamingWhisperEncoder(
            enc, window_frames=config.window_frames, hop_frames=config.hop_frames,
            lookahead_frames=config.lookahead_frames)
        self.proj = nn.Linear(D_MODEL, ssm.d_model)
        self.stack = SSMStack(ssm)
        self.head = nn.Linear(ssm.d_model, config.vocab_size)
        self.phone_head = (nn.Linear(ssm.d_model, config.phone_vocab_size)
                           if config.phone_vocab_size else None)

    stream_encoder: StreamingWhisperEncoder

    def _apply(self, fn, recurse=True):
        self.stream_encoder._apply(fn, recurse)
        return super()._apply(fn, recurse)

    @property
    def block_frames(self) -> int:
        """Frames a push must come in multiples of (one encoder hop)."""
        return self.config.hop_frames

    prefill_min = 2
    """Every chunk of a hop or more through ``prefill`` (a BatchRunner built with
    ``prefill_min=model.prefill_min``; a single frame is a hop only for a hop of one, which
    ``step`` takes)."""

    @property
    def compiled_frames(self) -> int:
        """Always 0: this recogniser runs eagerly (its cost is the encoder's matrix products,
        which torch.compile does not shrink); STTModel's has the same meaning."""
        return 0

    @property
    def out_size(self) -> int:
        return self.config.vocab_size + self.config.phone_vocab_size

    def init_state(self, batch: int) -> WhisperSTTState:
        return WhisperSTTState({**self.stream_encoder.init_state(batch, self.proj.weight.device),
                                **self.stack.init_state(batch).tensors})

    def state_from_bytes(self, data: bytes) -> WhisperSTTState:
        return WhisperSTTState.from_bytes(data, self.init_state(1))

    @torch.no_grad()
    def step(self, audio: torch.Tensor, state: WhisperSTTState
             ) -> tuple[torch.Tensor, WhisperSTTState]:
        """One 20 ms frame per stream: only for a model whose hop is one frame."""
        if self.config.hop_frames != 1:
            raise AudioInputError(f"this recogniser steps {self.config.hop_frames} frames at a "
                                  f"time: use prefill (a BatchRunner with prefill_min=2)")
        y, state = self.prefill(audio[:, None], state)
        return y[:, 0], state

    @torch.no_grad()
    def prefill(self, frames: torch.Tensor, state: WhisperSTTState
                ) -> tuple[torch.Tensor, WhisperSTTState]:
        """frames (b, n, 160), n a multiple of ``hop_frames`` -> (log-probs (b, n, out_size),
        the state advanced in place)."""
        if not isinstance(frames, torch.Tensor) or frames.dim() != 3 or frames.shape[2] != STEP_SAMPLES:
            got = tuple(frames.shape) if isinstance(frames, torch.Tensor) else type(frames).__name__
            raise AudioInputError(f"prefill takes (batch, n, {STEP_SAMPLES}) frames, got {got}")
        if not bool(torch.isfinite(frames).all()):
            raise AudioInputError("audio holds NaN or infinite samples")
        audio = frames.reshape(frames.shape[0], -1)
        feats, enc = self.stream_encoder.encode(audio, state.tensors)
        stack = state.stack_state()
        y, stack = self.stack.forward(self.proj(feats), stack)
        state.tensors.update(enc)
        state.tensors.update(stack.tensors)
        return heads_log_probs(self.head, self.phone_head, y), state

    def forward_features(self, feats: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Training: the stream's features (b, n, 384) from a fresh state -> (character logits
        (b, n, V), phone logits or None)."""
        y, _ = self.stack(self.proj(feats))
        return self.head(y), (self.phone_head(y) if self.phone_head is not None else None)

    @torch.no_grad()
    def utterance_log_probs(self, audio: torch.Tensor) -> torch.Tensor:
        """A whole utterance (1, n) at 8 kHz, encoded in one pass
        (``StreamingWhisperEncoder.utterance_features``), through the SSM from a fresh state ->
        log-probs (frames, out_size): the final pass of a model trained on "utterance" features."""
        return self.piece_log_probs(audio)[0]

    @torch.no_grad()
    def piece_log_probs(self, audio: torch.Tensor, state: StackState | None = None
                        ) -> tuple[torch.Tensor, StackState]:
        """One piece of a long utterance (1, n), encoded whole as ``utterance_log_probs`` does,
        the SSM carried on from ``state`` (the piece before's; None: the utterance's first) ->
        (log-probs (frames, out_size), the SSM's state after it)."""
        if not bool(torch.isfinite(audio).all()):
            raise AudioInputError("audio holds NaN or infinite samples")
        feats = self.stream_encoder.utterance_features(audio.to(self.proj.weight.device))
        y, state = self.stack(self.proj(feats[None]), state)
        return heads_log_probs(self.head, self.phone_head, y)[0], state

    def n_params(self) -> int:
        """Parameters parley trains (the encoder's 7.6 M are Whisper's)."""
        return sum(p.numel() for p in self.parameters())


def save_whisper_stt(model: WhisperSTTModel, directory: str | Path) -> Path:
    return write_checkpoint(directory, model, CHECKPOINT_KIND, model.config.to_dict())


def load_whisper_stt(directory: str | Path) -> WhisperSTTModel:
    """Load a checkpoint written by ``save_whisper_stt`` (the encoder from the wheel)."""
    directory = Path(directory)
    config, tensors = read_checkpoint(directory, CHECKPOINT_KIND)
    try:
        cfg = WhisperSTTConfig.from_dict(config)
    except ConfigError as exc:
        raise CheckpointFormatError(directory / "config.json", f"invalid config: {exc}") from exc
    model = WhisperSTTModel(cfg)
    load_weights(model, tensors, directory / "model.safetensors")
    return model.eval()


def checkpoint_kind(directory: str | Path) -> str | None:
    """The ``kind`` a checkpoint folder's config.json names (None if unreadable: the loader
    then says why)."""
    try:
        doc = json.loads((Path(directory) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    return doc.get("kind") if isinstance(doc, dict) else None
