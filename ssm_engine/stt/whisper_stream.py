"""Whisper tiny.en's encoder as a stream: a sliding window re-encoded every hop.

    enc = StreamingWhisperEncoder(WhisperEncoder.from_weights(), window_frames=75, hop_frames=10)
    state = enc.init_state(batch=k)                       # per stream: 120 samples + the window's mel
    feats, state = enc.encode(audio, state)               # audio (k, m*hop*160) at 8 kHz -> (k, m*hop, 384)

Whisper's encoder attends over everything it is given, both ways, so a stream cannot simply feed
it one frame at a time. Every ``hop_frames`` frames (20 ms each) the stream encodes the last
``window_frames`` frames of audio anew (positions 0..W-1, as Whisper hears a short clip) and keeps
the ``hop_frames`` outputs that end ``lookahead_frames`` before the window's end: each kept frame
has heard W - H - L frames of the past and L of the future. The state is fixed in size (the 120
samples the next mel frame needs and the window's raw log-mel, 2W x 80), so a step's cost never
grows with the call; the cost is W/H encoder frames for each frame kept. ``encode`` on a whole
clip (from ``init_state``) computes every window in one batched pass and returns exactly the
frames stepping hop by hop returns (``tests/ssm_engine/test_whisper_stream.py``): the features
a recogniser is trained on are the stream's.

Output frame j describes the audio of frame j - L: a recogniser reading these frames hears L
frames late, and its stream ends with at least L frames of silence (RecognizerStream's flush).
"""

from __future__ import annotations

import torch
from torch import nn

from ..errors import ConfigError
from .errors import AudioInputError
from .whisper_encoder import D_MODEL, MAX_FRAMES, N_MELS, WhisperEncoder, WhisperLogMel

__all__ = ["StreamingWhisperEncoder", "SILENCE_LOG_MEL", "STEP_SAMPLES", "UTTERANCE_TAIL_FRAMES"]

STEP_SAMPLES = 160                  # one encoder frame: 20 ms at 8 kHz
SILENCE_LOG_MEL = -10.0             # log10 of Whisper's power floor (1e-10): digital silence
UTTERANCE_TAIL_FRAMES = 25         # silence after an utterance encoded whole (0.5 s)
_MAX_WINDOWS = 64                   # windows encoded in one batch (bounds memory on long clips)


class StreamingWhisperEncoder(nn.Module):
    """See the module docstring. ``encoder`` is shared (not copied); it is not trained here."""

    def __init__(self, encoder: WhisperEncoder, *, window_frames: int, hop_frames: int,
                 lookahead_frames: int = 0) -> None:
        super().__init__()
        for name, v in (("window_frames", window_frames), ("hop_frames", hop_frames),
                        ("lookahead_frames", lookahead_frames)):
            if isinstance(v, bool) or not isinstance(v, int) or v < (0 if name[0] == "l" else 1):
                raise ConfigError(f"{name} must be a {'non-negative' if name[0] == 'l' else 'positive'}"
                                  f" int, got {v!r}")
        if hop_frames + lookahead_frames > window_frames or window_frames > MAX_FRAMES:
            raise ConfigError(f"need hop + look-ahead <= window <= {MAX_FRAMES} frames, got hop "
                              f"{hop_frames}, look-ahead {lookahead_frames}, window {window_frames}")
        self.encoder = encoder
        self.mel = WhisperLogMel()
        self.W, self.H, self.L = window_frames, hop_frames, lookahead_frames

    @property
    def hop_samples(self) -> int:
        return self.H * STEP_SAMPLES

    def init_state(self, batch: int, device: torch.device | None = None) -> dict[str, torch.Tensor]:
        dev = device if device is not None else self.encoder.pos.device
        return {"we_audio": torch.zeros(batch, self.mel.context, device=dev),
                "we_mel": torch.full((batch, 2 * self.W, N_MELS), SILENCE_LOG_MEL, device=dev)}

    @torch.no_grad()
    def encode(self, audio: torch.Tensor, state: dict[str, torch.Tensor]
               ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """audio (b, m * hop_samples) 8 kHz -> (features (b, m*H, 384), the state after it)."""
        b, n = audio.shape
        if n % self.hop_samples:
            raise AudioInputError(f"the encoder steps {self.H} frames ({self.hop_samples} samples)"
                                  f" at a time, got {n} samples")
        m = n // self.hop_samples
        if m == 0:
            return audio.new_zeros(b, 0, D_MODEL), state
        padded = torch.cat([state["we_audio"], audio], dim=1)
        mel = torch.cat([state["we_mel"], self.mel(padded)], dim=1)          # (b, 2W + 2mH, 80)
        # window j ends at hop j's last frame: mel rows [2H(j+1), 2H(j+1) + 2W)
        wins = mel.unfold(1, 2 * self.W, 2 * self.H)[:, 1:]                  # (b, m, 80, 2W)
        flat = wins.reshape(b * m, N_MELS, 2 * self.W)
        flat = WhisperLogMel.normalise(flat.transpose(1, 2)).transpose(1, 2)
        keep = slice(self.W - self.L - self.H, self.W - self.L)
        outs = [self.encoder(flat[i: i + _MAX_WINDOWS])[:, keep]
                for i in range(0, flat.shape[0], _MAX_WINDOWS)]
        feats = torch.cat(outs).reshape(b, m * self.H, D_MODEL)
        new = {"we_audio": padded[:, -self.mel.context:].contiguous(),
               "we_mel": mel[:, -2 * self.W:].contiguous()}
        return feats, new

    def clip_features(self, audio: torch.Tensor) -> torch.Tensor:
        """A whole clip (1, n) at 8 kHz, from a fresh stream, padded with L frames of silence
        and up to whole hops -> (frames, 384): frame j is the stream's j-th output, the audio
        of frame j - L (the first L describe the silence before the clip)."""
        n = audio.shape[1]
        frames = -(-n // STEP_SAMPLES) + self.L
        frames = -(-frames // self.H) * self.H
        x = torch.zeros(1, frames * STEP_SAMPLES, dtype=audio.dtype, device=audio.device)
        x[:, :n] = audio
        feats, _ = self.encode(x, self.init_state(1, audio.device))
        return feats[0]

    @torch.no_grad()
    def utterance_features(self, audio: torch.Tensor) -> torch.Tensor:
        """A whole utterance (1, n) at 8 kHz encoded in one pass, as Whisper hears a clip
        (positions from 0, 0.5 s of silence after it) -> (frames, 384), frame j the audio of
        frame j (no look-ahead shift). An utterance longer than Whisper's 30 s is encoded in
        consecutive pieces. The cost is one encoder pass over the utterance: a second pass at
        an utterance's end, not a stream."""
        if audio.dim() != 2 or audio.shape[0] != 1:
            raise AudioInputError(f"utterance_features takes one utterance (1, n), got "
                                  f"{tuple(audio.shape)}")
        n = -(-audio.shape[1] // STEP_SAMPLES)
        if n == 0:
            return audio.new_zeros(0, D_MODEL)
        x = audio.new_zeros(1, self.mel.context + (n + UTTERANCE_TAIL_FRAMES) * STEP_SAMPLES)
        x[:, self.mel.context: self.mel.context + audio.shape[1]] = audio
        mel = self.mel(x)                                                    # (1, 2(n + tail), 80)
        piece = MAX_FRAMES - UTTERANCE_TAIL_FRAMES
        outs = []
        for s in range(0, n, piece):
            e = min(n, s + piece)
            win = mel[:, 2 * s: 2 * (e + UTTERANCE_TAIL_FRAMES)]
            if e < n:                       # a piece inside a long utterance: silence after it
                win = torch.cat([mel[:, 2 * s: 2 * e],
                                 mel.new_full((1, 2 * UTTERANCE_TAIL_FRAMES, N_MELS),
                                              SILENCE_LOG_MEL)], dim=1)
            win = WhisperLogMel.normalise(win)
            outs.append(self.encoder(win.transpose(1, 2))[0, : e - s])
        return torch.cat(outs)
