"""The shipped SSM voices, by name: what an agent spec's ``voice:`` and ``parley say --voice`` pick.

    voice_dir("joe")            # -> Path(".../models/tts-joe")
    voice_dir("models/tts")     # a folder is taken as it is (a voice trained elsewhere)
    for v in VOICES.values(): print(v.name, v.gender, v.teacher)

Each voice is a folder with ``config.json``, ``model.safetensors`` and a ``MODEL_CARD.md`` that
says how it was made (``parley data tts --teacher ...``, ``parley train tts``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pipeline.errors import ConfigError

__all__ = ["Voice", "VOICES", "DEFAULT_VOICE", "voice_dir", "voices_in"]

MODELS = Path(__file__).resolve().parents[1] / "models"


@dataclass(frozen=True)
class Voice:
    name: str
    gender: str
    teacher: str        # the voice it was distilled from
    folder: Path


VOICES: dict[str, Voice] = {
    "slt": Voice("slt", "female", "festival's cmu_us_slt_arctic_hts (HTS)", MODELS / "tts"),
    "joe": Voice("joe", "male", "Piper's en_US-joe-medium (VITS, neural)", MODELS / "tts-joe"),
}
# joe, distilled from a neural teacher, is the default since 2026-12-06 (git 282f566): on the phone line
# Whisper tiny.en hears it better than slt (docs/history.md, "joe, the default voice").
DEFAULT_VOICE = "joe"


def voice_dir(voice: str | Path) -> Path:
    """A shipped voice's folder by name, or ``voice`` itself when it names a folder.
    Raises ConfigError for a name that is neither."""
    if isinstance(voice, str) and voice in VOICES:
        return VOICES[voice].folder
    path = Path(voice)
    if isinstance(voice, Path) or "/" in str(voice) or path.is_dir():
        return path
    raise ConfigError(f"unknown voice {voice!r}: one of {', '.join(VOICES)}, or a voice folder")


def voices_in(model_dir: str | Path) -> dict[str, Path]:
    """The shipped voices a model folder holds, by name, the default voice first: each voice's
    folder by its name in the repository's ``models/`` (``tts`` is slt, ``tts-joe`` is joe), as
    ``parley model-server --model-dir`` (or SageMaker's ``/opt/ml/model``) lays them out."""
    root = Path(model_dir)
    order = [DEFAULT_VOICE, *(n for n in VOICES if n != DEFAULT_VOICE)]
    return {name: root / VOICES[name].folder.name for name in order if (root / VOICES[name].folder.name).is_dir()}
