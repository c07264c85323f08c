"""Tiny untrained recognisers on Whisper's encoder, rigged to say one letter (plumbing tests)."""

from __future__ import annotations

import torch

from ssm_engine.stt.encoder_model import WhisperSTTConfig, WhisperSTTModel
from ssm_engine.stt.text import VOCAB

TINY_SSM = {"d_model": 32, "n_layers": 1, "d_state": 16, "headdim": 16, "expand": 2}


def saying(letter: str, features: str = "stream") -> WhisperSTTModel:
    """A tiny untrained recogniser rigged to say ``letter`` on every frame; ``features``
    "utterance" makes it a final-pass model."""
    torch.manual_seed(0)
    model = WhisperSTTModel(WhisperSTTConfig(window_frames=20, hop_frames=4, lookahead_frames=2,
                                             features=features, ssm=TINY_SSM))
    with torch.no_grad():
        model.head.weight.zero_()
        model.head.bias.zero_()
        model.head.bias[VOCAB.index(letter)] = 5.0
    return model.eval()
