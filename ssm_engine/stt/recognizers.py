"""Load a recogniser folder of either kind.

The pure SSM recogniser (``model.save_stt``) and the one on Whisper's encoder
(``encoder_model.save_whisper_stt``) share the StreamingModel protocol; this module picks the loader
by the kind a folder's config.json names, so callers need not know which one a folder holds.
"""

from __future__ import annotations

from pathlib import Path

from .encoder_model import CHECKPOINT_KIND as WHISPER_KIND, WhisperSTTModel, checkpoint_kind, load_whisper_stt
from .model import STTModel, load_stt

__all__ = ["load_recognizer", "load_stt_compiled"]


def load_stt_compiled(directory: str | Path, frames: str | int = "0") -> STTModel | WhisperSTTModel:
    """``load_recognizer`` then, for ``frames`` > 0 and the pure SSM recogniser,
    ``compile_prefill(frames)`` (a loader for a child process, whose arguments come as strings;
    a recogniser on Whisper's encoder runs eagerly)."""
    model = load_recognizer(directory)
    if int(frames) > 0 and isinstance(model, STTModel):
        model.compile_prefill(int(frames))
    return model


def load_recognizer(directory: str | Path) -> STTModel | WhisperSTTModel:
    """Load a recogniser folder of either kind, by the kind its config.json names: a
    ``save_stt`` checkpoint (the pure SSM recogniser) or a ``save_whisper_stt`` one (on
    Whisper's encoder). Errors name the offending file."""
    if checkpoint_kind(directory) == WHISPER_KIND:
        return load_whisper_stt(directory)
    return load_stt(directory)
